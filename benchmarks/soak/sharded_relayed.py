"""Relayed traffic over one fmpi-relay and over three with the rendezvous sharded: each relay's CPU seconds.

A real job (``fmpirun -n N --channel relay``): every rank sends ``--mib`` MiB
to the next rank of a ring in 1 MiB messages, all links relayed. Once over
one standalone fmpi-relay, once over three with ``FMPI_SHARD_RENDEZVOUS=1``
(rank r's carrier is at relay r mod 3, so a chunk between ranks of two
relays crosses both). Printed per relay: CPU seconds (``/proc/PID/stat``
utime + stime, the whole job), and the job's wall time.

    .venv/bin/python benchmarks/soak/sharded_relayed.py -n 6 --mib 200
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent

PROGRAM = """
import sys
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
r, n = c.rank, c.size
out, got = np.ones(1 << 17), np.empty(1 << 17)  # 1 MiB
for _ in range(int(sys.argv[1])):
    c.Sendrecv(out, dest=(r + 1) % n, recvbuf=got, source=(r - 1) % n)
c.Barrier()
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(n: int, mib: int, relays: int, program: Path) -> dict:
    procs = [subprocess.Popen([str(BIN / "fmpi-relay"), "--host", "127.0.0.1", "--port", "0", "--probe-port", "-1",
                               "--log-level", "WARNING"], stdout=subprocess.PIPE, text=True) for _ in range(relays)]
    try:
        urls = [p.stdout.readline().split()[-1] for p in procs]
        url = "tcp://" + ",".join(u[len("tcp://"):] for u in urls)
        before = [cpu_seconds(p.pid) for p in procs]
        env = {**os.environ, "FMPI_SHARD_RENDEZVOUS": "1" if relays > 1 else "0"}
        t = time.monotonic()
        job = subprocess.run([str(BIN / "fmpirun"), "-n", str(n), "--relay", url, "--channel", "relay", sys.executable,
                              str(program), str(mib)], capture_output=True, text=True, env=env, timeout=900)
        wall = time.monotonic() - t
        if job.returncode != 0:
            raise RuntimeError(job.stderr[-2000:])
        return {"relays": relays, "wall_s": round(wall, 2),
                "cpu_s": [round(cpu_seconds(p.pid) - b, 2) for p, b in zip(procs, before)]}
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=6, help="ranks (default %(default)s)")
    p.add_argument("--mib", type=int, default=200, help="MiB each rank sends around the ring (default %(default)s)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "ring.py"
        program.write_text(PROGRAM)
        rows = [run(args.n, args.mib, k, program) for k in (1, 3)]
    print("| relays | ranks | MiB per rank | wall | CPU s per relay | CPU s, all relays |")
    print("|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['relays']} | {args.n} | {args.mib} | {r['wall_s']} s | {' / '.join(map(str, r['cpu_s']))} | "
              f"{round(sum(r['cpu_s']), 2)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
