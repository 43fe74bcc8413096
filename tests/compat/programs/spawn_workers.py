"""Differential: Comm.Spawn / Spawn_multiple / Get_parent / Merge / Disconnect print what each process sees.

Parents (COMM_WORLD of the job) spawn three copies of this file, then two more
with Spawn_multiple; every process writes its lines to argv[1]/<who><rank>.txt.
"""

import sys

from mpi4py import MPI

outdir = sys.argv[1]
parent = MPI.Comm.Get_parent()
world = MPI.COMM_WORLD
who = "parent" if parent == MPI.COMM_NULL else f"child-{sys.argv[2]}"
_out = open(f"{outdir}/{who}{world.rank}.txt", "w")


def out(name, value):
    print(f"{who} {world.rank} {name} {value!r}", file=_out)


def talk(inter, high):
    """What both sides of a parents/children intercommunicator do alike."""
    out("sizes", (inter.Is_inter(), inter.rank, inter.size, inter.remote_size))
    out("allgather", inter.allgather((who, world.rank)))
    merged = inter.Merge(high)
    out("merged", (merged.rank, merged.size, merged.allreduce(world.rank), merged.allgather(who)))
    merged.Free()
    inter.Disconnect()


if parent == MPI.COMM_NULL:
    out("universe", world.Get_attr(MPI.UNIVERSE_SIZE))
    errcodes = []
    children = world.Spawn(sys.executable, [__file__, outdir, "single"], maxprocs=3, root=1, errcodes=errcodes)
    out("errcodes", errcodes)
    talk(children, False)
    children = world.Spawn_multiple([sys.executable] * 2, [[__file__, outdir, "a"], [__file__, outdir, "b"]], [1, 1])
    talk(children, True)
else:
    out("world", (world.rank, world.size, parent.remote_size))
    talk(parent, sys.argv[2] == "single")
_out.close()
