"""Differential: lowercase collectives print their results; fmpi must print what MPICH + mpi4py print."""

import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
# One file per rank (mpiexec interleaves the ranks' stdout mid-line).
_out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def out(name, value):
    print(f"{rank} {name} {value!r}", file=_out)


out("bcast", comm.bcast({"k": [1, 2, (3,)]} if rank == 0 else None))
out("bcast-root-last", comm.bcast(("x" * rank) if rank == size - 1 else None, root=size - 1))
out("gather", comm.gather(rank * rank, root=size // 2))
out("scatter", comm.scatter([[i] * i for i in range(size)] if rank == 0 else None))
out("allgather", comm.allgather(f"r{rank}"))
out("alltoall", comm.alltoall([(rank, d) for d in range(size)]))
for name in ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE", "NO_OP"):
    op = getattr(MPI, name)
    v = (rank * 5) % 7 + 1
    out(f"reduce-{name}", comm.reduce(v, op=op, root=size - 1))
    out(f"allreduce-{name}", comm.allreduce(v, op=op))
    out(f"scan-{name}", comm.scan(v, op=op))
    out(f"exscan-{name}", comm.exscan(v, op=op))
out("maxloc", comm.allreduce(((rank * 3) % 4, rank), op=MPI.MAXLOC))
out("minloc", comm.allreduce(((rank * 3) % 4, rank), op=MPI.MINLOC))
concat = MPI.Op.Create(lambda a, b, dt: a + b, commute=False)
out("user-noncommutative", comm.allreduce(f"<{rank}>", op=concat))
out("user-scan", comm.scan(f"<{rank}>", op=concat))
out("callable", comm.allreduce([rank], op=lambda a, b: a + b))
out("default-op", comm.allreduce([rank]))
out("barrier", comm.barrier())
_out.close()
