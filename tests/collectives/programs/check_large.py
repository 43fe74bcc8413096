"""Large buffers (16 MiB per rank and more): the bandwidth algorithms end to end, default table.

Integer-valued float64 data keeps every reference exact; every rank checks
its whole result against numpy and the Allreduce result is compared bitwise
across ranks.
"""

from __future__ import annotations

import numpy as np
from common import attempt, case, comm, digest, finish, rank, size
from mpi4py import MPI

MiB = 1 << 20
N = 16 * MiB // 8  # float64 elements in 16 MiB


def values(r: int, n: int) -> np.ndarray:
    return (np.arange(n, dtype="f8") % 1000) + r


def allreduce():
    out = np.empty(N)
    comm.Allreduce(values(rank, N), out, MPI.SUM)
    expect = (np.arange(N, dtype="f8") % 1000) * size + size * (size - 1) / 2
    case(np.array_equal(out, expect), "Allreduce 16 MiB")
    case(len(set(comm.allgather(digest(out)))) == 1, "Allreduce 16 MiB bitwise identical")
    buf = values(rank, N)
    comm.Iallreduce(MPI.IN_PLACE, buf, MPI.MAX).Wait()
    case(np.array_equal(buf, values(size - 1, N)), "Iallreduce IN_PLACE MAX 16 MiB")


def reduce():
    out = np.empty(N) if rank == size - 1 else None
    comm.Reduce(values(rank, N), out, MPI.SUM, root=size - 1)
    if rank == size - 1:
        case(np.array_equal(out, (np.arange(N, dtype="f8") % 1000) * size + size * (size - 1) / 2), "Reduce 16 MiB")


def bcast():
    buf = values(7, N) if rank == 0 else np.empty(N)
    comm.Bcast(buf, root=0)
    case(np.array_equal(buf, values(7, N)), "Bcast 16 MiB")
    got = comm.bcast({"w": values(3, N)} if rank == size - 1 else None, root=size - 1)
    case(np.array_equal(got["w"], values(3, N)), "bcast of a 16 MiB array inside a dict")


def allgather():
    n = max(1, N // size)
    out = np.empty(n * size)
    comm.Allgather(values(rank, n), out)
    case(np.array_equal(out, np.concatenate([values(r, n) for r in range(size)])), f"Allgather {n * size * 8 >> 20} MiB total")


def alltoall():
    n = max(1, N // size)
    send = values(rank, n * size)
    out = np.empty_like(send)
    comm.Alltoall(send, out)
    expect = np.concatenate([values(s, n * size)[rank * n : (rank + 1) * n] for s in range(size)])
    case(np.array_equal(out, expect), "Alltoall 16 MiB")


def reduce_scatter():
    n = max(1, N // size)
    out = np.empty(n)
    comm.Reduce_scatter_block(values(rank, n * size), out, MPI.SUM)
    full = (np.arange(n * size, dtype="f8") % 1000) * size + size * (size - 1) / 2
    case(np.array_equal(out, full[rank * n : (rank + 1) * n]), "Reduce_scatter_block 16 MiB")


for fn in (allreduce, reduce, bcast, allgather, alltoall, reduce_scatter):
    attempt(fn, fn.__name__)
finish()
