"""Differential: communicator construction and groups print ranks, sizes and comparisons."""

import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
# One file per rank (mpiexec interleaves the ranks' stdout mid-line).
_out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def out(name, value):
    print(f"{rank} {name} {value!r}", file=_out)


half = comm.Split(rank % 2, size - rank)
out("split", (half.rank, half.size, half.allgather(rank)))
out("compare-half", comm.Compare(half))
out("compare-dup", comm.Compare(comm.Dup()))
out("compare-same", comm.Compare(comm.Split(0, rank)))
out("compare-reversed", comm.Compare(comm.Split(0, -rank)))
none = comm.Split(MPI.UNDEFINED if rank == 1 else 0)
out("split-undefined", none == MPI.COMM_NULL)
g = comm.Get_group()
evens = g.Incl(list(range(0, size, 2)))
out("incl", (evens.size, evens.rank))
out("excl", (g.Excl([0]).size, g.Excl([0]).rank))
out("translate", g.Translate_ranks(list(range(size)), evens))
out("range-incl", g.Range_incl([(size - 1, 0, -1)]).rank)
out("union", MPI.Group.Union(evens, g).size)
out("difference", MPI.Group.Difference(g, evens).size)
out("group-compare", (g.Compare(evens), g.Compare(g), g.Compare(g.Range_incl([(size - 1, 0, -1)]))))
created = comm.Create(evens)
out("create", None if created == MPI.COMM_NULL else (created.rank, created.size, created.allreduce(rank)))
shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=-rank)
out("split-type", (shared.rank, shared.size))
_out.close()
