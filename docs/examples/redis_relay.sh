#!/usr/bin/env bash
# Start a throw-away redis-server, run a job with Redis as the relay, stop the server.
set -euo pipefail
port=$(python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
coproc REDIS { exec redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --requirepass secret; }
trap 'kill "$REDIS_PID"' EXIT
while read -r line <&"${REDIS[0]}"; do  # its log, until it serves
    [[ $line == *"Ready to accept connections"* ]] && break
done
fmpirun -n 3 --relay "redis://:secret@127.0.0.1:$port/0" python docs/examples/hello.py
