pgbench -h 10.213.0.2 -p 5440 -U drivelab_client2 -c 4 -j 2 -n -T 6 -R 400 -l --log-prefix=/tmp/drivelab-latency-logs/nvme-r400/client2 drivelab_client2
