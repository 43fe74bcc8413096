"""OSU-style collective latency: fmpi against mpi4py + MPICH, in the same run, as a Markdown table.

    .venv/bin/python benchmarks/collectives/osu_collectives.py                 # 8 B .. 64 MiB, N = 2 and 4
    .venv/bin/python benchmarks/collectives/osu_collectives.py --quick         # a reduced size set
    .venv/bin/python benchmarks/collectives/osu_collectives.py --ns 4 --colls allreduce --sizes 8,1M,16M

For every N the same worker (this file with ``--worker``) runs under
``fmpirun`` and under MPICH's ``mpiexec``, each in two configurations, and
each fmpi configuration is compared with its MPICH counterpart:

- ``fmpi``: fmpirun's defaults (TCP links; between ranks on one host, large
  payloads through shared-memory lanes), against
- ``mpich-shm``: MPICH's defaults (shared memory between local ranks);
- ``fmpi-tcp``: ``FMPI_SHM=0``, everything over TCP links, as between
  Lambda functions, against
- ``mpich-tcp``: ``MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp``.
  NOLOCAL alone is not enough with this MPICH (5.x, ch4 with ucx and ofi):
  it routes local traffic to the netmod, but the default netmod (UCX) then
  uses its own shared-memory transports (the ranks map ``/dev/shm/ucx_shm_*``
  and run as fast as with shm). Forcing OFI's tcp provider leaves sockets only.
  ``--mpich-tcp ucx`` uses UCX with ``UCX_TLS=tcp`` instead (slower).

Latency is OSU's: per rank, the mean time of one call over ``iters`` calls
after a warm-up, averaged over the ranks. On a shared machine use
``--repeat K``: every backend runs K times, interleaved, and each cell keeps
its minimum (``--stat median``: its median). Under the tables, cells whose
runs spread by more than ``SPREAD_NOTE`` (slowest over fastest) are listed:
with more ranks than cores both libraries' large collectives depend on how
the scheduler interleaves the ranks, and one run's ratio can mislead (on 2
cores, 4 ranks, a 1 MiB allreduce of MPICH over TCP took 0.85-1.8 ms from
run to run). Sizes are bytes per rank: the
vector of bcast and allreduce (float32 elements), each rank's block for
allgather, and the block sent to each peer for alltoall (capped by
``--max-block``, 16 MiB by default, so alltoall stays within memory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COLLECTIVES = ["barrier", "bcast", "allreduce", "allgather", "alltoall"]
EXTRA = ["reduce"]  # on request (--colls reduce)
KiB, MiB = 1 << 10, 1 << 20
FULL_SIZES = [8 << (2 * i) for i in range(13)]  # 8 B, 32 B, ..., 32 MiB
FULL_SIZES = sorted(set(FULL_SIZES + [1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]))
QUICK_SIZES = [8, 1 * KiB, 64 * KiB, 1 * MiB, 4 * MiB, 16 * MiB]
BIN = Path(sys.executable).parent

BACKENDS = ["fmpi", "mpich-shm", "fmpi-tcp", "mpich-tcp"]
STATS = {"min": min, "median": statistics.median}
SPREAD_NOTE = 1.25  # runs of one cell further apart than this (slowest / fastest) are listed under the table
FMPI_TCP_ENV = {"FMPI_SHM": "0"}
TCP_ENVS = {
    "ofi": {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"},
    "ucx": {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "tcp"},
}


def parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B").rstrip("I")
    scale = {"K": KiB, "M": MiB, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def fmt_size(n: int) -> str:
    for unit, scale in (("MiB", MiB), ("KiB", KiB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def iterations(nbytes: int, scale: float) -> tuple[int, int]:
    """(warm-up, timed) iterations for a message size, OSU-like (fewer for large messages)."""
    if nbytes <= 16 * KiB:
        iters = 500
    elif nbytes <= 256 * KiB:
        iters = 100
    elif nbytes <= 4 * MiB:
        iters = 20
    else:
        iters = 5
    iters = max(2, int(iters * scale))
    return max(1, iters // 10), iters


# ------------------------------------------------------------------ worker
def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    results = []

    def timed(fn, nbytes: int) -> float:
        warm, iters = iterations(nbytes, args.scale)
        for _ in range(warm):
            fn()
        comm.Barrier()
        start = MPI.Wtime()
        for _ in range(iters):
            fn()
        mine = (MPI.Wtime() - start) / iters
        total = comm.allreduce(mine)
        return total / size * 1e6

    for coll in args.colls:
        sizes = [0] if coll == "barrier" else args.sizes
        for nbytes in sizes:
            if coll in ("allgather", "alltoall") and nbytes > args.max_block:
                continue
            if coll == "barrier":
                usec = timed(comm.Barrier, 0)
            elif coll == "bcast":
                buf = np.zeros(nbytes, np.uint8)
                usec = timed(lambda: comm.Bcast(buf, root=0), nbytes)
            elif coll == "allreduce":
                count = max(1, nbytes // 4)
                send = np.ones(count, np.float32)
                recv = np.empty_like(send)
                usec = timed(lambda: comm.Allreduce(send, recv, MPI.SUM), nbytes)
            elif coll == "reduce":
                count = max(1, nbytes // 4)
                send = np.ones(count, np.float32)
                recv = np.empty_like(send)
                usec = timed(lambda: comm.Reduce(send, recv, MPI.SUM, 0), nbytes)
            elif coll == "allgather":
                send = np.zeros(nbytes, np.uint8)
                recv = np.empty(nbytes * size, np.uint8)
                usec = timed(lambda: comm.Allgather(send, recv), nbytes)
            elif coll == "alltoall":
                block = nbytes // size if args.alltoall_total else nbytes
                send = np.zeros(block * size, np.uint8)
                recv = np.empty_like(send)
                usec = timed(lambda: comm.Alltoall(send, recv), nbytes)
            else:
                raise SystemExit(f"unknown collective {coll}")
            results.append({"coll": coll, "bytes": nbytes, "usec": usec})
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(results, f)


# ------------------------------------------------------------------ driver
NOTES: list[str] = []  # fmpirun's link summaries, printed under the tables


def run_backend(backend: str, n: int, args: argparse.Namespace) -> dict[tuple[str, int], float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        worker_args = [
            str(Path(__file__).resolve()),
            "--worker",
            "--out", str(out),
            "--colls", ",".join(args.colls),
            "--sizes", ",".join(str(s) for s in args.sizes),
            "--max-block", str(args.max_block),
            "--scale", str(args.scale),
        ]
        env = dict(os.environ)
        if backend.startswith("fmpi"):
            argv = [str(BIN / "fmpirun"), "-n", str(n), sys.executable, *worker_args]
            if backend == "fmpi-tcp":
                env.update(FMPI_TCP_ENV)
        else:
            env.pop("PYTHONPATH", None)
            if backend == "mpich-tcp":
                env.update(TCP_ENVS[args.mpich_tcp])
            argv = [str(BIN / "mpiexec"), "-n", str(n), sys.executable, *worker_args]
        started = time.monotonic()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout)
        if proc.returncode != 0:
            print(f"{backend} N={n} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
            return {}
        print(f"  {backend:9s} N={n}: {time.monotonic() - started:5.1f} s", file=sys.stderr)
        # How the ranks were linked matters: a relayed (failed-over) link is far slower than a direct one.
        NOTES.extend(f"{backend} N={n}: {line.strip()}" for line in proc.stderr.splitlines() if line.startswith("fmpirun: links"))
        return {(r["coll"], r["bytes"]): r["usec"] for r in json.loads(out.read_text())}


def fmt_us(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "—"
    return f"{a / b:.2f}×"


def table(n: int, results: dict[str, dict], args: argparse.Namespace) -> str:
    lines = [
        f"### N = {n}",
        "",
        "| collective | size | fmpi (µs) | MPICH shm (µs) | fmpi/shm | fmpi tcp (µs) | MPICH tcp (µs) | fmpi tcp/tcp |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = sorted(set().union(*[r.keys() for r in results.values()]), key=lambda k: ((COLLECTIVES + EXTRA).index(k[0]), k[1]))
    for coll, nbytes in keys:
        f, s, ft, t = (results[b].get((coll, nbytes)) for b in BACKENDS)
        size = "—" if coll == "barrier" else fmt_size(nbytes)
        lines.append(
            f"| {coll} | {size} | {fmt_us(f)} | {fmt_us(s)} | {fmt_ratio(f, s)} "
            f"| {fmt_us(ft)} | {fmt_us(t)} | {fmt_ratio(ft, t)} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--alltoall-total", action="store_true", help=argparse.SUPPRESS)  # size: a rank's whole buffer
    parser.add_argument("--ns", default="2,4", help="communicator sizes (default 2,4)")
    parser.add_argument("--colls", default=",".join(COLLECTIVES), help="collectives to run")
    parser.add_argument("--sizes", default=None, help="comma-separated sizes (8, 64K, 1M, ...); default 8 B .. 64 MiB")
    parser.add_argument("--quick", action="store_true", help=f"sizes {', '.join(map(fmt_size, QUICK_SIZES))} and fewer iterations")
    parser.add_argument("--max-block", type=parse_size, default=16 * MiB, help="largest allgather/alltoall block (default 16M)")
    parser.add_argument("--scale", type=float, default=None, help="multiply the iteration counts")
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"a subset of {','.join(BACKENDS)}")
    parser.add_argument("--mpich-tcp", choices=sorted(TCP_ENVS), default="ofi", help="MPICH netmod forced onto TCP (default ofi)")
    parser.add_argument("--repeat", type=int, default=1, help="run every backend this many times, interleaved (see --stat)")
    parser.add_argument("--stat", choices=sorted(STATS), default="min", help="with --repeat: what each cell keeps (default min)")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    args.colls = [c.strip() for c in args.colls.split(",") if c.strip()]
    if args.sizes:
        args.sizes = [parse_size(s) for s in str(args.sizes).split(",")]
    else:
        args.sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.scale is None:
        args.scale = 0.3 if args.quick else 1.0
    return args


Samples = dict[str, dict[tuple[str, int], list[float]]]  # {backend: {(collective, bytes): µs of each run}}


def measure(args: argparse.Namespace, n: int) -> Samples:
    """Every run's µs per cell at N = n; a backend that failed every time has an empty dict."""
    samples: Samples = {b: {} for b in BACKENDS}
    for _ in range(args.repeat):
        for b in samples:
            if b in args.backends.split(","):
                for key, usec in run_backend(b, n, args).items():
                    samples[b].setdefault(key, []).append(usec)
    return samples


def summarize(samples: Samples, stat: str) -> dict[str, dict[tuple[str, int], float]]:
    """One figure per cell: the `stat` ("min" or "median") of its runs."""
    pick = STATS[stat]
    return {b: {key: pick(runs) for key, runs in cells.items()} for b, cells in samples.items()}


def spread_note(samples: Samples, limit: float = SPREAD_NOTE) -> str:
    """The cells whose runs lie further apart than `limit` (slowest / fastest), one line; "" if none."""
    wide = []
    for b in BACKENDS:
        for (coll, nbytes), runs in sorted(samples.get(b, {}).items()):
            if len(runs) > 1 and min(runs) > 0 and max(runs) / min(runs) > limit:
                size = "" if coll == "barrier" else f" {fmt_size(nbytes)}"
                wide.append(f"{b} {coll}{size}: {fmt_us(min(runs))}-{fmt_us(max(runs))} µs")
    if not wide:
        return ""
    return f"Runs more than {limit:g}× apart: " + "; ".join(wide) + "."


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    print(f"# Collective latency, fmpi vs MPICH ({', '.join(args.colls)})\n")
    print(f"mpich-tcp: {' '.join(f'{k}={v}' for k, v in TCP_ENVS[args.mpich_tcp].items())}; {os.cpu_count()} CPUs\n")
    if args.repeat > 1:
        what = "minimum" if args.stat == "min" else "median"
        print(f"Each cell: the {what} over {args.repeat} runs, the backends interleaved.\n")
    for n in (int(x) for x in args.ns.split(",")):
        samples = measure(args, n)
        print(table(n, summarize(samples, args.stat), args))
        print()
        note = spread_note(samples)
        if note:
            print(note + "\n")
        sys.stdout.flush()
    if NOTES:
        print("fmpi links: " + "; ".join(NOTES))


if __name__ == "__main__":
    main()
