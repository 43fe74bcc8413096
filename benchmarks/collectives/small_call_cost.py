"""The Python work of one small collective call (Allreduce by default), counted in bytecodes: a cost that timing on a shared machine cannot show.

    .venv/bin/python benchmarks/collectives/small_call_cost.py                   # N = 2, one float32
    .venv/bin/python benchmarks/collectives/small_call_cost.py --n 4 --top 30
    .venv/bin/python benchmarks/collectives/small_call_cost.py --n 4 --coll allgather   # bcast, alltoall, barrier too
    .venv/bin/python benchmarks/collectives/small_call_cost.py --max-opcodes 2300  # exit 1 above that

A small allreduce is all Python work: sending, receiving and matching one
frame per round costs fmpi about 50 µs of CPU where MPICH spends a few, and
the wall-clock latency (``osu_collectives.py``) follows that work. On a
shared 2-core virtual machine, though, the same code ran at 29 to 61 ns per
Python call from one second to the next (another tenant's load), so a timed
A/B run cannot show a 5 % saving. The number of bytecodes the interpreter
runs per call can: it depends only on the code path, and is the same from
run to run within about 1 %.

The worker (this file with ``--worker``) runs under fmpirun with
``FMPI_SPIN_US=0`` (a wait sleeps at once instead of polling, so waiting
adds no bytecodes), makes ``--warm`` calls, then counts every bytecode the
main thread runs during ``--iters`` calls of ``comm.Allreduce`` on
``--count`` float32 elements (``sys.settrace`` with opcode events), or of
the collective ``--coll`` names on as many float32 per rank (per block for
allgather and alltoall). Rank 0's
counts are printed per call: the total, the share of each layer (api,
collectives, transport), and the functions that cost most. The progress
thread is not counted: on this path it sleeps.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
LAYERS = ("api", "collectives", "transport")
COLLS = ("allreduce", "allgather", "alltoall", "bcast", "barrier")


def where(filename: str) -> str:
    """`fmpi/transport/stream.py` for fmpi's files, else the file's name."""
    parts = Path(filename).parts
    return "/".join(parts[parts.index("fmpi"):]) if "fmpi" in parts else Path(filename).name


def layer(place: str) -> str:
    parts = place.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "fmpi" and parts[1] in LAYERS else "other"


# ------------------------------------------------------------------ worker
def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    send = np.ones(args.count, np.float32)
    recv = np.empty_like(send)
    call = {
        "allreduce": lambda: comm.Allreduce(send, recv, MPI.SUM),
        "allgather": lambda: comm.Allgather(send, gathered),
        "alltoall": lambda: comm.Alltoall(spread, exchanged),
        "bcast": lambda: comm.Bcast(send, root=0),
        "barrier": comm.Barrier,
    }[args.coll]
    gathered = np.empty(args.count * comm.size, np.float32)
    spread = np.ones(args.count * comm.size, np.float32)
    exchanged = np.empty_like(spread)
    counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def trace(frame, event, _arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[(code.co_filename, code.co_name)] += 1
        return trace

    for _ in range(args.warm):
        call()
    comm.Barrier()
    sys.settrace(trace)
    for _ in range(args.iters):
        call()
    sys.settrace(None)
    if args.coll == "allreduce" and recv[0] != comm.size:
        raise SystemExit(f"wrong result {recv[0]} (expected {comm.size})")
    if comm.rank == 0:
        per_call = {f"{where(f)}:{name}": n / args.iters for (f, name), n in counts.items()}
        Path(args.out).write_text(json.dumps(per_call))


# ------------------------------------------------------------------ driver
def measure(args: argparse.Namespace) -> dict[str, float]:
    """Bytecodes per call by ``file:function``, from rank 0 of a real job."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "counts.json"
        cmd = [
            str(BIN / "python"), "-m", "fmpi", "-n", str(args.n), str(BIN / "python"), str(Path(__file__).resolve()),
            "--worker", "--out", str(out), "--iters", str(args.iters), "--warm", str(args.warm), "--count", str(args.count), "--coll", args.coll,
        ]
        env = dict(os.environ, FMPI_SPIN_US="0")
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            raise SystemExit(f"the job failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
        return json.loads(out.read_text())


def report(per_call: dict[str, float], total: float, args: argparse.Namespace) -> str:
    by_layer: collections.Counter[str] = collections.Counter()
    for key, n in per_call.items():
        by_layer[layer(key.rsplit(":", 1)[0])] += n
    lines = [
        f"{args.coll.capitalize()} of {args.count} float32, N = {args.n}, rank 0: {total:,.0f} bytecodes per call",
        "",
        "| layer | bytecodes per call | share |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {by_layer[name]:,.0f} | {by_layer[name] / total:.0%} |" for name in (*LAYERS, "other")]
    lines += ["", "| function | bytecodes per call |", "|---|---:|"]
    top = sorted(per_call.items(), key=lambda kv: -kv[1])[: args.top]
    lines += [f"| {key} | {n:,.1f} |" for key, n in top]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--coll", choices=COLLS, default="allreduce", help="the collective (default allreduce)")
    p.add_argument("--count", type=int, default=1, help="float32 elements per rank (default 1)")
    p.add_argument("--iters", type=int, default=300, help="counted calls (default 300)")
    p.add_argument("--warm", type=int, default=50, help="calls before counting (default 50)")
    p.add_argument("--top", type=int, default=20, help="functions listed (default 20)")
    p.add_argument("--max-opcodes", type=float, default=None, help="exit 1 when a call costs more bytecodes than this")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("n", "count", "iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    if args.warm < 0:
        p.error(f"--warm must be 0 or more, not {args.warm}")
    return args


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    per_call = measure(args)
    total = sum(per_call.values())
    print(report(per_call, total, args))
    if args.max_opcodes is not None and total > args.max_opcodes:
        print(f"\nover budget: {total:,.0f} bytecodes per call, more than --max-opcodes {args.max_opcodes:,.0f}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
