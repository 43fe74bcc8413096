"""Barrier and allreduce as a relayed job runs them on the relay (server-side), checked exactly.

World, Dup and Split halves (the two halves run *different* collectives at
the same time: one half reduces small and large vectors, the other loops
barriers and MAX reductions in place), non-blocking calls pending while
blocking ones run, ops and types the server cannot do (falling back to
point-to-point). Every rank prints ``SERVER <json>``: its provider's count of
completed server-side calls, so the test can tell which path ran.
"""

from __future__ import annotations

import json

import numpy as np
from common import attempt, case, comm, finish, rank, size
from mpi4py import MPI

try:
    from fmpi.api import runtime
except ImportError:  # under MPICH
    runtime = None


def world():
    for count, dtype in ((1, "i8"), (7, "f8"), (100, "i4"), (3, "c16"), (5, "b1"), (40_000, "f4"), (300_001, "i8")):
        x = (np.arange(count) % 5 + rank).astype(dtype)
        full = np.sum([(np.arange(count) % 5 + r).astype(dtype) for r in range(size)], axis=0).astype(dtype)
        if dtype == "b1":
            full = np.logical_or.reduce([(np.arange(count) % 5 + r).astype(dtype) for r in range(size)])
            out = np.empty_like(x)
            comm.Allreduce(x, out, MPI.LOR)
        else:
            out = np.empty_like(x)
            comm.Allreduce(x, out, MPI.SUM)
        case(np.array_equal(out, full), f"world Allreduce {dtype} n={count}")
        if dtype in ("c16", "b1"):
            continue
        buf = x.copy()
        comm.Allreduce(MPI.IN_PLACE, buf, MPI.MAX)
        ref = np.max([(np.arange(count) % 5 + r).astype(dtype) for r in range(size)], axis=0)
        case(np.array_equal(buf, ref), f"world Allreduce MAX in place {dtype} n={count}")
    # random floats: every rank must hold the same bits
    rng = np.random.default_rng(rank)
    x = rng.standard_normal(5000)
    out = np.empty_like(x)
    comm.Allreduce(x, out)
    case(len(set(comm.allgather(out.tobytes()))) == 1, "float Allreduce bitwise identical on all ranks")
    for _ in range(5):
        comm.Barrier()
    comm.barrier()
    # ops the server cannot do: user-defined, MAXLOC pairs
    user = MPI.Op.Create(lambda a, b, t: np.add(np.frombuffer(a, "i8"), np.frombuffer(b, "i8"), out=np.frombuffer(b, "i8")), commute=True)
    out = np.empty(3, "i8")
    comm.Allreduce(np.full(3, rank, "i8"), out, user)
    case(np.array_equal(out, np.full(3, size * (size - 1) // 2)), "user op falls back")
    pairs = np.array([(float(rank), rank)], dtype=np.dtype([("v", "f8"), ("i", "i4")], align=True))
    got = np.empty_like(pairs)
    comm.Allreduce([pairs, MPI.DOUBLE_INT], [got, MPI.DOUBLE_INT], MPI.MAXLOC)
    case(got["i"][0] == size - 1, "MAXLOC falls back")
    case(comm.allreduce(rank) == size * (size - 1) // 2, "lowercase allreduce (pickled) stays point-to-point")


def halves():
    color = rank % 2
    half = comm.Split(color, rank)
    dup = comm.Dup()
    pending = dup.Iallreduce(np.full(1000, rank, "i8"), nb := np.empty(1000, "i8"))
    for it in range(20):
        if color == 0:
            x = np.full(it * 3000 + 1, rank + it, "i8")
            out = np.empty_like(x)
            half.Allreduce(x, out)
            case(np.all(out == sum(r + it for r in range(0, size, 2))), f"half 0 Allreduce it={it}")
        else:
            half.Barrier()
            buf = np.array([rank * 10 + it, -rank], "i4")
            half.Allreduce(MPI.IN_PLACE, buf, MPI.MAX)
            odd = list(range(1, size, 2))
            case(buf.tolist() == [max(odd) * 10 + it, -min(odd)], f"half 1 Allreduce MAX it={it}")
    pending.Wait()
    case(np.all(nb == size * (size - 1) // 2), "Iallreduce on a Dup while halves work")
    req = [comm.Ibarrier(), dup.Ibarrier()]
    MPI.Request.Waitall(req)
    total = np.empty(1, "i8")
    comm.Allreduce(np.array([rank], "i8"), total)
    case(total[0] == size * (size - 1) // 2, "parent after the halves")
    half.Free()
    dup.Free()


attempt(world, "world")
attempt(halves, "halves")
calls = runtime.server_collective_calls() if runtime is not None else {}
print(f"SERVER {rank} {json.dumps(calls, sort_keys=True)}", flush=True)
server = runtime.state.server if runtime is not None else None
if server is not None and server.kind == "dso":  # which fmpi-relay nodes this rank's objects lived on
    print(f"NODES {rank} {json.dumps(sorted(server.client._nodes))}", flush=True)
finish()
