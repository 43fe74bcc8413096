#!/usr/bin/env bash
# Create a job with --print-join, then join its 2 ranks by hand with the line it prints. Here both run on this
# machine; across hosts, start it with --relay-listen 0.0.0.0:7000 and run the line on each host.
set -euo pipefail
coproc HOST { exec fmpirun -n 2 --print-join python docs/examples/hello.py; }
host_pid=$HOST_PID
read -r _ <&"${HOST[0]}"     # "Job J is waiting for 2 ranks. On each host, run:"
read -r join <&"${HOST[0]}"  # "FMPI_TOKEN=... fmpirun --join tcp://127.0.0.1:PORT --job J --size 2 python docs/examples/hello.py"
eval "$join" &
eval "$join"
wait $!
wait "$host_pid"
