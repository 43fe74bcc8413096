"""Under ``--channel relay``: server-side barrier/allreduce vs the point-to-point algorithms over the relay.

    .venv/bin/python benchmarks/relay/bench_server_collectives.py                 # N = 2, 4, 8; fmpi-relay
    .venv/bin/python benchmarks/relay/bench_server_collectives.py --redis redis://127.0.0.1:6379/0
    .venv/bin/python benchmarks/relay/bench_server_collectives.py --ns 2 --scale 0.1

Each row is one real ``fmpirun -n N --channel relay`` job (the relay fmpirun
starts, or Redis): "server" is the table's default there (DSO objects or
Redis scripts), "p2p" forces the point-to-point forms with
``FMPI_COLL_ALGO=barrier:dissemination,allreduce:recursive_doubling`` and
``...allreduce:ring`` (the faster of the two is shown) — what a relayed job
ran before, every round of the algorithm through the relay.
Latency is OSU's: mean time per call after a warm-up, averaged over ranks.
Printed as one Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIZES = {"8 B": 1, "1 MiB": 1 << 17}  # float64 elements

WORKER = r"""
import json, sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
iters = int(sys.argv[1])
res = {}
def timed(name, fn, n):
    for _ in range(max(2, n // 10)):
        fn()
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    res[name] = (time.perf_counter() - t) / n
timed("barrier", comm.Barrier, iters)
for label, count in json.loads(sys.argv[2]).items():
    x = np.full(count, comm.rank, "f8"); out = np.empty_like(x)
    timed("allreduce " + label, lambda: comm.Allreduce(x, out), iters if count < 1000 else max(3, iters // 20))
# optional argv[3]: ping-pong sizes {label: bytes} between ranks 0 and 1 (the others wait at the barrier);
# "send/recv <label>" is half the round trip
for label, nbytes in (json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}).items():
    buf = np.zeros(max(1, nbytes), "u1")
    def pingpong():
        if comm.rank == 0:
            comm.Send(buf, 1, 7); comm.Recv(buf, 1, 7)
        elif comm.rank == 1:
            comm.Recv(buf, 0, 7); comm.Send(buf, 0, 7)
    timed("send/recv " + label, pingpong, iters if nbytes < 1000 else max(3, iters // 20))
    comm.Barrier()
    if comm.rank < 2:
        res["send/recv " + label] /= 2
    else:
        del res["send/recv " + label]
times = comm.gather(res)
if comm.rank == 0:
    print("RESULT " + json.dumps({k: sum(t[k] for t in times if k in t) / sum(k in t for t in times) for k in res}))
"""


def run(n: int, relay: str | None, forced: str | None, iters: int, sizes: dict[str, int] = SIZES,
        channel: str | None = "relay", pingpong: dict[str, int] | None = None) -> dict[str, float]:
    """One ``fmpirun -n N [--channel C] [--relay URL]`` job of WORKER; mean seconds per call by name.

    ``sizes``: allreduce label -> float64 count; ``channel=None``: plain ``fmpirun`` (no --channel,
    FMPI_CHANNEL unset); ``pingpong``: send/recv label -> bytes, between ranks 0 and 1.
    """
    env = dict(os.environ)
    env.pop("FMPI_COLL_ALGO", None)
    if forced:
        env["FMPI_COLL_ALGO"] = forced
    if channel is None:
        env.pop("FMPI_CHANNEL", None)
    cmd = [sys.executable, "-m", "fmpi", "-n", str(n), *(["--channel", channel] if channel else []),
           *(["--relay", relay] if relay else []),
           sys.executable, "-c", WORKER, str(iters), json.dumps(sizes), *([json.dumps(pingpong)] if pingpong else [])]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"job failed (exit {done.returncode}): {done.stderr[-2000:]}")


def run_p2p(n: int, relay: str | None, iters: int, **kw) -> dict[str, float]:
    """The point-to-point algorithms forced over the relay: per name, the faster of recursive doubling and the ring."""
    rd = run(n, relay, "barrier:dissemination,allreduce:recursive_doubling", iters, **kw)
    ring = run(n, relay, "barrier:dissemination,allreduce:ring", iters, **kw)
    return {k: min(rd[k], ring[k]) for k in rd}


def fmt(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:,.0f} µs" if us < 10_000 else f"{us / 1000:,.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="2,4,8")
    ap.add_argument("--redis", metavar="URL", help="also run on this Redis (redis://...)")
    ap.add_argument("--scale", type=float, default=1.0, help="scale the iteration counts (0.1 for a quick look)")
    args = ap.parse_args()
    iters = max(5, int(200 * args.scale))
    relays = [("fmpi-relay (DSO)", None)] + ([("Redis", args.redis)] if args.redis else [])
    print("| relay | collective | N | server-side | point-to-point over the relay | p2p / server |")
    print("|---|---|---:|---:|---:|---:|")
    for name, relay in relays:
        for n in (int(x) for x in args.ns.split(",")):
            server = run(n, relay, None, iters)
            best = run_p2p(n, relay, iters)
            for coll in server:
                p2p = best[coll]
                print(f"| {name} | {coll} | {n} | {fmt(server[coll])} | {fmt(p2p)} | {p2p / server[coll]:.1f}× |", flush=True)

if __name__ == "__main__":
    main()
