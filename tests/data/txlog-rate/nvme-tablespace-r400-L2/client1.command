pgbench -h 10.213.0.2 -p 5440 -U drivelab_client1 -c 4 -j 2 -n -T 6 -R 400 -L 2 -l --log-prefix=/tmp/drivelab-latency-logs/nvme-r400-L2/client1 drivelab_client1
