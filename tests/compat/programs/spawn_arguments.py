"""Differential: how Spawn and Spawn_multiple read their arguments, as mpi4py over MPICH does.

Only the root's command, args, maxprocs and info count (the others pass None and -1); one string of
arguments is one argument; errcodes is one flat list for Spawn and one list per command for Spawn_multiple;
every parent spawns from its own COMM_SELF at once. Every process writes its lines to argv[1]/<who>.txt;
the children write what they were given.
"""

import os
import sys

from mpi4py import MPI

outdir = sys.argv[1]
parent = MPI.Comm.Get_parent()
world = MPI.COMM_WORLD


def child() -> None:
    label = sys.argv[2]
    with open(f"{outdir}/child-{label}-{world.rank}-{os.getpid()}.txt", "w") as out:
        print(f"child {label} rank {world.rank} of {world.size} args {sys.argv[3:]!r} parents {parent.remote_size}",
              file=out)
    parent.Barrier()
    parent.Disconnect()


def parents() -> None:
    out = open(f"{outdir}/parent{world.rank}.txt", "w")
    me = [sys.executable, __file__, outdir]
    root = world.rank == 0
    children = world.Spawn_multiple(
        [sys.executable] * 2 if root else None,
        [[__file__, outdir, "multi-a"], [__file__, outdir, "multi-b", "x y"]] if root else None,
        [1, 2] if root else -1,
        info=MPI.INFO_NULL, root=0,
    )
    print("multiple", world.rank, children.remote_size, file=out)
    children.Barrier()
    children.Disconnect()

    children = world.Spawn_multiple([me[0]] * 2, [me[1:] + ["defaults"]] * 2)  # maxprocs: 1 per command
    print("defaults", world.rank, children.remote_size, file=out)
    children.Barrier()
    children.Disconnect()

    # errcodes: a non-root's are sized by its own maxprocs (mpi4py), so every rank passes the same
    errcodes = []
    children = world.Spawn_multiple([me[0]] * 2, [me[1:] + ["errcodes"]] * 2, [2, 1], errcodes=errcodes,
                                      root=world.size - 1)
    print("errcodes multiple", world.rank, children.remote_size, errcodes, file=out)
    children.Barrier()
    children.Disconnect()

    errcodes = []
    children = world.Spawn(me[0], me[1:] + ["single"] if root else None, 2, errcodes=errcodes)
    print("errcodes single", world.rank, children.remote_size, errcodes, file=out)
    children.Barrier()
    children.Disconnect()

    children = MPI.COMM_SELF.Spawn(me[0], me[1:] + [f"self{world.rank}"], maxprocs=1)  # every parent at once
    print("self", world.rank, children.size, children.remote_size, file=out)
    children.Barrier()
    children.Disconnect()

    if root:  # refused at the root alone, before anything starts (mpi4py: ValueError)
        for command, args, maxprocs in ((sys.executable, None, None), ([me[0]], [[], []], None),
                                        ([me[0]], None, [1, 1])):
            try:
                MPI.COMM_SELF.Spawn_multiple(command, args, maxprocs)
            except ValueError as exc:
                print("refused", type(exc).__name__, file=out)
    out.close()


child() if parent != MPI.COMM_NULL else parents()
