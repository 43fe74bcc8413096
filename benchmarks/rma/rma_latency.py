"""One-sided latency, and mpi4py's test_rma wall time, of two fmpi source trees, interleaved.

Cases (N = 2; rank 1 is the origin, rank 0 the target, waiting in a Barrier meanwhile):

* ``lock/put 8 B/unlock``: µs per ``Lock(0)``, ``Put`` of one int64, ``Unlock(0)``
* ``get 8 B``: µs per ``Get`` of one int64 inside ``Lock_all``
* ``fetch_and_op``: µs per ``Fetch_and_op`` (SUM, int64) inside ``Lock_all``
* ``test_rma N=n``: seconds of mpi4py's test_rma (``--suite-ns``; benchmarks/compat/mpi4py_suite.py fetches it)

Each latency is the median over 20 blocks of one run; the table gives, per tree, the median over the
rounds, A, B, A, B ... (a shared machine swings by tens of percent: interleaving puts both trees under the
same swings). A tree is a ``src`` folder, put first on PYTHONPATH of this checkout's fmpirun:

    .venv/bin/python benchmarks/rma/rma_latency.py --before /tmp/old/src --after src --rounds 5 --suite-ns 2,4

Under ``mpiexec`` (MPICH + mpi4py) the worker alone gives the reference: ``mpiexec -n 2 python rma_latency.py --worker``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parents[2]
BIN = REPO / ".venv" / "bin"


def _per_call(comm, fn, iters: int, blocks: int = 20) -> float:
    """µs per fn() on rank 1: the median over `blocks` blocks, after a warm-up (rank 0 waits in a Barrier)."""
    times = []
    if comm.rank == 1:
        for _ in range(max(10, iters // 10)):
            fn()
        per_block = max(1, iters // blocks)
        for _ in range(blocks):
            start = time.perf_counter()
            for _ in range(per_block):
                fn()
            times.append((time.perf_counter() - start) / per_block)
    comm.Barrier()
    return 1e6 * statistics.median(times) if times else 0.0


def worker(iters: int) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    mem = np.zeros(4, dtype="i8")
    win = MPI.Win.Create(mem, disp_unit=8, comm=comm)
    one, out = np.ones(1, dtype="i8"), np.zeros(1, dtype="i8")
    comm.Barrier()

    def lock_put_unlock() -> None:
        win.Lock(0)
        win.Put(one, 0, 1)
        win.Unlock(0)

    out_ = {"lock/put 8 B/unlock": _per_call(comm, lock_put_unlock, iters)}
    win.Lock_all()
    out_["get 8 B"] = _per_call(comm, lambda: win.Get(out, 0, 2), iters)
    out_["fetch_and_op"] = _per_call(comm, lambda: win.Fetch_and_op(one, out, 0, 3, MPI.SUM), iters)
    win.Unlock_all()
    win.Free()
    if comm.rank == 1:
        print("RESULT " + json.dumps(out_), flush=True)


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src.resolve())}


def run_latency(src: Path, iters: int) -> dict[str, float]:
    argv = [str(BIN / "fmpirun"), "-n", "2", str(BIN / "python"), str(SCRIPT), "--worker", "--iters", str(iters)]
    proc = subprocess.run(argv, env=_env(src), capture_output=True, text=True, timeout=600, check=False)
    results = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not results:
        raise SystemExit(f"rma_latency: {src} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(results[-1])


def run_suite(src: Path, n: int, suite: Path) -> float:
    """Seconds of mpi4py's test_rma at `n` ranks (it must pass)."""
    code = "import sys; sys.path.insert(0, '.'); import unittest; unittest.main(module='test_rma', argv=['x'])"
    start = time.perf_counter()
    proc = subprocess.run([str(BIN / "fmpirun"), "-n", str(n), str(BIN / "python"), "-c", code], cwd=suite,
                          env=_env(src), capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"rma_latency: test_rma under {src} at N={n} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path)
    parser.add_argument("--after", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--suite-ns", default="", help="also time mpi4py's test_rma at these N (e.g. 2,4)")
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        worker(args.iters)
        return
    trees = {"before": args.before, "after": args.after}
    suite = None
    if args.suite_ns:
        sys.path.insert(0, str(REPO / "benchmarks" / "compat"))
        import mpi4py_suite

        suite = Path(mpi4py_suite.ensure_suite(mpi4py_suite.DEFAULT_CACHE))
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for r in range(args.rounds):
        for name, src in trees.items():
            found = run_latency(src, args.iters)
            for n in filter(None, args.suite_ns.split(",")):
                found[f"test_rma N={n} (s)"] = run_suite(src, int(n), suite)  # type: ignore[arg-type]
            for case, value in found.items():
                samples[name].setdefault(case, []).append(value)
            print(f"round {r + 1} {name}: {json.dumps(found)}", file=sys.stderr, flush=True)
    print("| case | before (median) | after (median) | after / before |\n|---|---:|---:|---:|")
    for case, xs in samples["before"].items():
        a, b = statistics.median(xs), statistics.median(samples["after"][case])
        print(f"| {case} | {a:,.1f} | {b:,.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
