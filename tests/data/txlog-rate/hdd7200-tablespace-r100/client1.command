pgbench -h 10.213.0.2 -p 5440 -U drivelab_client1 -c 4 -j 2 -n -T 8 -R 100 -l --log-prefix=/tmp/drivelab-latency-logs/hdd7200-r100/client1 drivelab_client1
