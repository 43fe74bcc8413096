"""Interleaved timings of two source trees of fmpi: is a change as fast as the code before it?

Runs the same cases under each tree's own ``fmpirun`` and Python (its
``.venv``), alternating A, B, A, B ... for ``--rounds`` rounds, and prints
the median of each case per tree and the ratio B / A:

* ``allreduce 8 B N=2`` / ``N=4``: µs per ``comm.Allreduce`` of 2 float32
* ``p2p 8 B``: µs per half round trip of a ``Send``/``Recv`` ping-pong (N = 2)
* ``bandwidth 16 MiB``: MB/s of a window of ``Isend`` answered by one ack (osu_bw, N = 2)

On a shared machine single runs swing by tens of percent; interleaving puts
both trees under the same swings. Each latency is the median over 20 blocks
of one run (a block in which another process took the core does not count),
and the table gives the median and the best of the rounds.

    .venv/bin/python benchmarks/before_after.py --before /work/wt/base --after . --rounds 7

``--fmpirun-args`` passes options to both trees' fmpirun, e.g. relaying over Redis:

    .venv/bin/python benchmarks/before_after.py --before /work/wt/base --after . --ns 2 \
        --fmpirun-args "--relay redis://127.0.0.1:6379/0 --channel relay"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve()
LATENCY = "µs"
BANDWIDTH = "MB/s"
BW_SIZE = 16 << 20


# ------------------------------------------------------------------ worker (runs inside a rank)
def _time_per_call(comm, fn, iters: int, blocks: int = 20) -> float:
    """Seconds per call of fn(), as rank 0 measured it: the median over `blocks` blocks of the `iters`
    calls after a warm-up (a block in which another process took the core does not count)."""
    for _ in range(max(10, iters // 10)):
        fn()
    comm.Barrier()
    per_block = max(1, iters // blocks)
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(per_block):
            fn()
        times.append((time.perf_counter() - start) / per_block)
    return statistics.median(times)


def _bandwidth(comm, MPI, np, windows: int, window: int = 4) -> float:
    """MB/s from rank 0 to rank 1: `windows` windows of `window` Isend's of 16 MiB, each answered by one ack."""
    peer = 1 - comm.rank
    bufs = [np.ones(BW_SIZE, dtype="u1") for _ in range(window)]
    ack = np.zeros(1, dtype="u1")
    comm.Barrier()
    start = 0.0
    for i in range(windows + 1):  # the first window warms up
        if i == 1:
            start = time.perf_counter()
        if comm.rank == 0:
            MPI.Request.Waitall([comm.Isend(b, peer, 2) for b in bufs])
            comm.Recv(ack, peer, 3)
        else:
            MPI.Request.Waitall([comm.Irecv(b, peer, 2) for b in bufs])
            comm.Send(ack, peer, 3)
    return windows * window * BW_SIZE / (time.perf_counter() - start) / 1e6


def worker(scale: float) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    n = comm.size
    out: dict[str, float] = {}
    a = np.ones(2, dtype="f4")
    b = np.zeros(2, dtype="f4")
    iters = max(20, int((20000 if n == 2 else 4000) * scale))
    out[f"allreduce 8 B N={n}"] = 1e6 * _time_per_call(comm, lambda: comm.Allreduce(a, b, op=MPI.SUM), iters)
    if n == 2:
        peer = 1 - comm.rank
        buf = np.ones(8, dtype="u1")

        def ping() -> None:
            if comm.rank == 0:
                comm.Send(buf, peer, 1)
                comm.Recv(buf, peer, 1)
            else:
                comm.Recv(buf, peer, 1)
                comm.Send(buf, peer, 1)

        out["p2p 8 B"] = 1e6 * _time_per_call(comm, ping, max(20, int(20000 * scale))) / 2
        out["bandwidth 16 MiB"] = _bandwidth(comm, MPI, np, max(2, int(16 * scale)))
    if comm.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------ driver
def run_tree(tree: Path, n: int, scale: float, timeout: float, options: tuple[str, ...] = ()) -> dict[str, float]:
    """One job of `n` ranks under `tree`'s fmpirun (given `options`) and Python: {case: value}."""
    bin_dir = tree / ".venv" / "bin"
    argv = [str(bin_dir / "fmpirun"), "-n", str(n), *options, str(bin_dir / "python"), str(SCRIPT), "--worker", "--scale", str(scale)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=tree, check=False)
    results = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not results:
        raise SystemExit(f"before_after: {tree} N={n} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(results[-1])


def unit(case: str) -> str:
    return BANDWIDTH if case.startswith("bandwidth") else LATENCY


def table(samples: dict[str, dict[str, list[float]]], names: tuple[str, str]) -> list[str]:
    """Markdown rows: case, each side's median and best run, and the ratios B / A of both."""
    a, b = names
    rows = [
        f"| case | {a} median | {b} median | {b} / {a} (median) | {a} best | {b} best | {b} / {a} (best) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in samples[a]:
        xs, ys = samples[a][case], samples[b][case]
        best = max if unit(case) == BANDWIDTH else min
        ma, mb, ba, bb = statistics.median(xs), statistics.median(ys), best(xs), best(ys)
        u = unit(case)
        rows.append(f"| {case} | {ma:,.1f} {u} | {mb:,.1f} {u} | {mb / ma:.3f} | {ba:,.1f} {u} | {bb:,.1f} {u} | {bb / ba:.3f} |")
    return rows


def check_tree(tree: Path) -> Path:
    tree = tree.resolve()
    if not (tree / ".venv" / "bin" / "fmpirun").exists():
        raise SystemExit(f"before_after: {tree} has no .venv/bin/fmpirun (make one: python3 -m venv .venv && "
                         ".venv/bin/pip install -e '.[test]')")
    return tree


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="source tree A (with its own .venv)")
    parser.add_argument("--after", type=Path, help="source tree B (with its own .venv)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each tree, interleaved (default 5)")
    parser.add_argument("--ns", default="2,4", help="world sizes (default 2,4; the p2p cases run at 2)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the iteration counts")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per job")
    parser.add_argument("--fmpirun-args", default="", help="options for both trees' fmpirun, e.g. \"--relay redis://... --channel relay\"")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.scale)
        return
    if args.before is None or args.after is None or args.rounds < 1:
        parser.error("--before and --after are required, and --rounds must be at least 1")
    trees = {"before": check_tree(args.before), "after": check_tree(args.after)}
    ns = [int(n) for n in args.ns.split(",")]
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for r in range(args.rounds):
        for name, tree in trees.items():
            for n in ns:
                for case, value in run_tree(tree, n, args.scale, args.timeout, tuple(shlex.split(args.fmpirun_args))).items():
                    samples[name].setdefault(case, []).append(value)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"before: {trees['before']}\nafter:  {trees['after']}\n{args.rounds} interleaved rounds {args.fmpirun_args}\n")
    print("\n".join(table(samples, ("before", "after"))))


if __name__ == "__main__":
    main()
