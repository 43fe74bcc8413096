"""Differential: uppercase collectives with mpi4py's message-spec forms; results printed as lists."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
# One file per rank (mpiexec interleaves the ranks' stdout mid-line).
_out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def out(name, arr):
    print(f"{rank} {name} {np.asarray(arr).tolist()!r}", file=_out)


x = np.arange(6, dtype="i4") * (rank + 1)
for name in ("SUM", "PROD", "MAX", "MIN", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR"):
    op = getattr(MPI, name)
    r = np.zeros(6, "i4")
    comm.Allreduce(x, r, op)
    out(f"Allreduce-{name}", r)
    r = np.zeros(6, "i4")
    comm.Reduce([x, MPI.INT], [r, MPI.INT] if rank == 0 else None, op, 0)
    out(f"Reduce-{name}", r)
    r = np.zeros(6, "i4")
    comm.Scan(x, r, op)
    out(f"Scan-{name}", r)
    r = np.full(6, -1, "i4")
    comm.Exscan(x, r, op)
    out(f"Exscan-{name}", r if rank else [])
b = np.arange(5.0) * 3 if rank == 0 else np.zeros(5)
comm.Bcast([b, MPI.DOUBLE], root=0)
out("Bcast", b)
g = np.zeros(3 * size, "i8")
comm.Allgather([np.full(3, rank, "i8"), MPI.INT64_T], [g, 3, MPI.INT64_T])
out("Allgather", g)
counts = [r + 1 for r in range(size)]
gv = np.zeros(sum(counts), "f4")
comm.Allgatherv(np.full(rank + 1, rank, "f4"), [gv, counts])
out("Allgatherv", gv)
gv = np.zeros(sum(counts) + 2 * size, "f4")
displs = [sum(counts[:r]) + 2 * r for r in range(size)]
comm.Gatherv(np.full(rank + 1, rank + 0.5, "f4"), [gv, (counts, displs), MPI.FLOAT] if rank == size - 1 else None, size - 1)
out("Gatherv", gv if rank == size - 1 else [])
sv = np.zeros(rank + 1, "f4")
comm.Scatterv([np.arange(sum(counts), dtype="f4"), counts, MPI.FLOAT] if rank == 0 else None, sv, 0)
out("Scatterv", sv)
s = np.zeros(2, "i4")
comm.Scatter(np.arange(2 * size, dtype="i4") if rank == 0 else None, s, 0)
out("Scatter", s)
a = np.zeros(2 * size, "i4")
comm.Alltoall(np.arange(2 * size, dtype="i4") + 10 * rank, a)
out("Alltoall", a)
sc = [(rank + d) % 3 for d in range(size)]
rc = [(s + rank) % 3 for s in range(size)]
av = np.zeros(sum(rc), "i4")
comm.Alltoallv([np.arange(sum(sc), dtype="i4") + 100 * rank, sc], [av, rc])
out("Alltoallv", av)
rs = np.zeros(2, "i8")
comm.Reduce_scatter_block(np.arange(2 * size, dtype="i8") + rank, rs, MPI.SUM)
out("Reduce_scatter_block", rs)
rcounts = [r % 2 + 1 for r in range(size)]
rsv = np.zeros(rcounts[rank], "i8")
comm.Reduce_scatter(np.arange(sum(rcounts), dtype="i8") * (rank + 1), rsv, rcounts, MPI.SUM)
out("Reduce_scatter", rsv)
ip = np.arange(4, dtype="f8") + rank
comm.Allreduce(MPI.IN_PLACE, ip, MPI.MAX)
out("Allreduce-IN_PLACE", ip)
pair = np.zeros(3, np.dtype([("v", "f8"), ("i", "i4")], align=True))
pair["v"], pair["i"] = (np.arange(3) * rank) % 2, rank
res = np.zeros_like(pair)
comm.Allreduce([pair, MPI.DOUBLE_INT], [res, MPI.DOUBLE_INT], MPI.MAXLOC)
out("MAXLOC", [(float(v), int(i)) for v, i in zip(res["v"], res["i"])])
comm.Barrier()
_out.close()
