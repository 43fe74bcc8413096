#!/usr/bin/env bash
# Start a standalone fmpi-relay, run a job on it, stop the relay (what two terminals would do by hand).
set -euo pipefail
coproc RELAY { exec fmpi-relay --host 127.0.0.1 --port 0 --probe-port -1 --log-level WARNING; }
trap 'kill "$RELAY_PID"' EXIT
read -r _ _ _ url <&"${RELAY[0]}"  # its first line: "fmpi-relay listening on tcp://127.0.0.1:PORT"
fmpirun -n 3 --relay "$url" python docs/examples/hello.py
