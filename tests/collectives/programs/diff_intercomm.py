"""Differential: intercommunicators (p2p to remote ranks, every collective, Merge/Dup/Split/Create) print results.

COMM_WORLD splits into a low and a high half (uneven for odd sizes); every
rank writes its lines to its own file (argv[1]/rank<r>.txt).
"""

import sys

import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
low = rank < size // 2
half = world.Split(0 if low else 1, rank)
inter = half.Create_intercomm(0, world, size // 2 if low else 0, tag=11)
me, lsize, rsize = inter.rank, inter.size, inter.remote_size
_out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def out(name, value):
    print(f"{rank} {name} {value!r}", file=_out)


def as_list(a):
    return np.asarray(a).tolist()


def rooted(call, *args, first_low=True):
    """Run a rooted collective with each rank of the sending group as root, in turn: (root side, result)."""
    results = []
    senders_low = first_low
    for root in range(lsize if low == senders_low else rsize):
        if low == senders_low:
            role = MPI.ROOT if root == me else MPI.PROC_NULL
        else:
            role = root
        results.append(call(role, root, *args))
    return results


out("shape", (inter.Is_inter(), inter.is_intra, me, lsize, rsize, inter.Get_remote_group().size))
out("types", (type(inter).__name__, isinstance(inter, MPI.Intracomm)))
for bad in (lambda: MPI.Intercomm(half), lambda: MPI.Intracomm(inter)):
    try:
        bad()
        out("constructor", "accepted")
    except TypeError:
        out("constructor", "TypeError")
out("null", (MPI.Intercomm() == MPI.COMM_NULL, MPI.Comm.Get_parent() == MPI.COMM_NULL))

# ------------------------------------------------------------------ p2p
reqs = [inter.isend((rank, j), j, tag=3) for j in range(rsize)]
status = MPI.Status()
got = []
for _ in range(rsize):
    got.append((inter.recv(source=MPI.ANY_SOURCE, tag=3, status=status), status.Get_source()))
MPI.Request.Waitall(reqs)
out("p2p", sorted(got))
buf = np.zeros(4, "i")
if me < rsize:
    inter.Sendrecv(np.arange(4, dtype="i") * (rank + 1), me, 5, buf, me, 5, status)
    out("Sendrecv", (as_list(buf), status.Get_source(), status.Get_count(MPI.INT)))

# ----------------------------------------------------------- collectives
inter.Barrier()
inter.barrier()
out("bcast", rooted(lambda role, root: inter.bcast(("from", rank) if role == MPI.ROOT else None, root=role)))


def Bcast(role, root):
    data = np.full(3, rank, "d") if role == MPI.ROOT else np.zeros(3, "d")
    inter.Bcast(data, root=role)
    return as_list(data)


out("Bcast", rooted(Bcast))
out("gather", rooted(lambda role, root: inter.gather(rank * 2, root=role), first_low=False))


def Gather(role, root):
    recv = np.full(rsize * 2, -1, "i") if role == MPI.ROOT else None
    inter.Gather(np.array([rank, -rank], "i"), recv, root=role)
    return None if recv is None else as_list(recv)


out("Gather", rooted(Gather))


def Gatherv(role, root):
    counts = [j + 1 for j in range(rsize)]
    recv = np.full(sum(counts), -1, "i") if role == MPI.ROOT else None
    inter.Gatherv(np.full(me + 1, rank, "i"), [recv, counts] if recv is not None else None, root=role)
    return None if recv is None else as_list(recv)


out("Gatherv", rooted(Gatherv, first_low=False))
out("scatter", rooted(lambda role, root: inter.scatter([(rank, j) for j in range(rsize)] if role == MPI.ROOT else None,
                                                       root=role)))


def Scatterv(role, root):
    counts = [j + 2 for j in range(rsize)]
    send = [np.arange(sum(counts), dtype="i") + 100 * rank, counts] if role == MPI.ROOT else None
    recv = np.full(me + 2, -1, "i")
    inter.Scatterv(send, recv if role not in (MPI.ROOT, MPI.PROC_NULL) else None, root=role)
    return as_list(recv)


out("Scatterv", rooted(Scatterv))


def Scatter(role, root):
    send = np.arange(rsize * 2, dtype="l") * (rank + 1) if role == MPI.ROOT else None
    recv = np.full(2, -1, "l")
    inter.Scatter(send, recv if role not in (MPI.ROOT, MPI.PROC_NULL) else None, root=role)
    return as_list(recv)


out("Scatter", rooted(Scatter, first_low=False))
out("allgather", inter.allgather(rank))
out("alltoall", inter.alltoall([(rank, j) for j in range(rsize)]))
recv = np.full(rsize * 2, -1, "i")
inter.Allgather(np.array([rank, 2 * rank], "i"), recv)
out("Allgather", as_list(recv))
counts = [j + 1 for j in range(rsize)]
recv = np.full(sum(counts), -1, "i")
inter.Allgatherv(np.full(me + 1, rank, "i"), [recv, counts])
out("Allgatherv", as_list(recv))
recv = np.full(rsize, -1, "i")
inter.Alltoall(np.arange(rsize, dtype="i") + 10 * rank, recv)
out("Alltoall", as_list(recv))
scounts = [j + 1 for j in range(rsize)]  # to remote j: j+1 items; from remote j: me+1 items
recv = np.full((me + 1) * rsize, -1, "i")
inter.Alltoallv([np.arange(sum(scounts), dtype="i") + 100 * rank, scounts], [recv, [me + 1] * rsize])
out("Alltoallv", as_list(recv))
out("reduce", rooted(lambda role, root: inter.reduce(rank + 1, op=MPI.PROD, root=role)))


def Reduce(role, root):
    recv = np.full(3, -1, "d") if role == MPI.ROOT else None
    inter.Reduce(None if role in (MPI.ROOT, MPI.PROC_NULL) else np.full(3, rank + 1.5), recv, op=MPI.SUM, root=role)
    return None if recv is None else as_list(recv)


out("Reduce", rooted(Reduce, first_low=False))
out("allreduce", inter.allreduce(rank, op=MPI.MAX))
out("allreduce-sum", inter.allreduce([rank], op=MPI.SUM))
recv = np.empty(5, "i")
inter.Allreduce(np.arange(5, dtype="i") * (rank + 1), recv, op=MPI.SUM)
out("Allreduce", as_list(recv))
# Both groups' vectors have lsize * rsize elements: each process gets rsize of the other group's reduction.
recv = np.full(rsize, -1, "i")
inter.Reduce_scatter_block(np.arange(lsize * rsize, dtype="i") + rank, recv, op=MPI.SUM)
out("Reduce_scatter_block", as_list(recv))
recv = np.full(rsize, -1, "i")
inter.Reduce_scatter(np.arange(lsize * rsize, dtype="i") * (rank + 1), recv, [rsize] * lsize, op=MPI.SUM)
out("Reduce_scatter", as_list(recv))
recv = np.empty(5, "i")
req = inter.Iallreduce(np.arange(5, dtype="i") + rank, recv, op=MPI.MIN)
req2 = inter.Ibarrier()
MPI.Request.Waitall([req, req2])
out("Iallreduce", as_list(recv))
recv = np.full(rsize, -1, "i")
inter.Iallgather(np.array([rank], "i"), recv).Wait()
out("Iallgather", as_list(recv))
data = np.zeros(2, "i") if low else np.array([7, 8], "i")
if low:
    inter.Ibcast(data, root=0).Wait()
else:
    inter.Ibcast(data, root=MPI.ROOT if me == 0 else MPI.PROC_NULL).Wait()
out("Ibcast", as_list(data))

# ---------------------------------------------------------- construction
for high in (False, True):
    merged = inter.Merge(high=(not low) if high else low)
    out("Merge", (high, merged.rank, merged.size, merged.allgather(rank)))
    merged.Free()
dup = inter.Dup()
out("Dup", (dup.rank, dup.remote_size, dup.allgather(rank), MPI.Comm.Compare(inter, dup), MPI.Comm.Compare(inter, inter)))
split = inter.Split(rank % 2, -rank)
out("Split", None if split == MPI.COMM_NULL else (split.rank, split.size, split.remote_size, split.allgather(rank)))
out("Split-undefined", inter.Split(MPI.UNDEFINED) == MPI.COMM_NULL)
group = inter.Get_group().Incl([0])
created = inter.Create(group)
out("Create", None if created == MPI.COMM_NULL else (created.size, created.remote_size, created.allgather(rank)))
fromgroups = MPI.Intercomm.Create_from_groups(inter.Get_group(), 0, inter.Get_remote_group(), 0)
out("Create_from_groups", (fromgroups.size, fromgroups.remote_size, MPI.Comm.Compare(inter, fromgroups),
                           fromgroups.allgather(rank)))
dup.Disconnect()
inter.Free()
_out.close()
