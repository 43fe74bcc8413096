"""Communicators and groups: Dup, Split, Split_type, Create, Create_group, Group, Compare, Free.

And isolation: the two halves of a Split run *different* collectives at the
same time (one half Allreduce/Bcast on large buffers, the other
Alltoall/allgather/Iallreduce), while non-blocking collectives on the parent
and on a Dup are pending; every result must be exactly right, which it would
not be if any message leaked between communicators.
"""

from __future__ import annotations

import numpy as np
from common import attempt, case, comm, finish, rank, size
from mpi4py import MPI


def construction():
    dup = comm.Dup()
    case(dup.size == size and dup.rank == rank, "Dup keeps size and rank")
    case(comm.Compare(dup) == MPI.CONGRUENT, f"Compare(Dup) {comm.Compare(dup)}")
    case(comm.Compare(comm) == MPI.IDENT, "Compare(self)")
    case(dup.allreduce(1) == size, "collective on a Dup")
    dup.Free()

    color, key = rank % 2, -rank  # reversed order inside each half
    half = comm.Split(color, key)
    members = [r for r in range(size) if r % 2 == color]
    case(half.size == len(members), f"Split size {half.size}")
    case(half.rank == sorted(members, reverse=True).index(rank), f"Split key order rank {half.rank}")
    case(half.allgather(rank) == sorted(members, reverse=True), "Split members in key order")
    if size > 1:
        case(comm.Compare(half) == MPI.UNEQUAL, "Compare(half) UNEQUAL")
    same = comm.Split(0, rank)
    case(comm.Compare(same) == MPI.CONGRUENT, "Split(0, rank) is CONGRUENT")
    rev = comm.Split(0, -rank)
    expect = MPI.SIMILAR if size > 1 else MPI.CONGRUENT
    case(comm.Compare(rev) == expect, f"Split(0, -rank) compares {comm.Compare(rev)}")
    none = comm.Split(MPI.UNDEFINED if rank == 0 else 1, 0)
    case((none == MPI.COMM_NULL) if rank == 0 else none.size == size - 1, "Split UNDEFINED gives COMM_NULL")

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    case(node.size == size, "Split_type(SHARED): one host, everyone")
    case(comm.Split_type(MPI.UNDEFINED) == MPI.COMM_NULL, "Split_type(UNDEFINED) gives COMM_NULL")

    group = comm.Get_group()
    case(group.size == size and group.rank == rank, "Get_group")
    evens = group.Incl(list(range(0, size, 2)))
    odds = group.Excl(list(range(0, size, 2)))
    case(evens.size == (size + 1) // 2 and odds.size == size // 2, "Incl/Excl sizes")
    case(evens.rank == (rank // 2 if rank % 2 == 0 else MPI.UNDEFINED), "Incl rank")
    case(group.Translate_ranks(list(range(size)), evens) == [r // 2 if r % 2 == 0 else MPI.UNDEFINED for r in range(size)],
         "Translate_ranks")
    case(evens.Translate_ranks([0]) == [0], "Translate_ranks into COMM_WORLD's group")
    case(MPI.Group.Union(evens, odds).size == size, "Union")
    case(MPI.Group.Union(evens, odds).Compare(group) == (MPI.SIMILAR if size > 2 else MPI.IDENT), "Union is SIMILAR")
    case(MPI.Group.Intersection(evens, group).Compare(evens) == MPI.IDENT, "Intersection")
    case(MPI.Group.Difference(group, odds).Compare(evens) == MPI.IDENT, "Difference")
    case(group.Range_incl([(0, size - 1, 2)]).Compare(evens) == MPI.IDENT, "Range_incl")
    case(group.Incl([]).size == 0 and MPI.GROUP_EMPTY.size == 0, "empty group")

    created = comm.Create(evens)
    if rank % 2 == 0:
        case(created.size == evens.size and created.rank == rank // 2, "Create: member")
        case(created.allreduce(rank) == sum(range(0, size, 2)), "Create: collective")
    else:
        case(created == MPI.COMM_NULL, "Create: non-member gets COMM_NULL")
    if rank % 2 == 1:
        cg = comm.Create_group(odds, tag=7)
        case(cg.size == odds.size and cg.allreduce(1) == odds.size, "Create_group (odd ranks only)")
    # The parent still works after all that, with nothing left over from the children.
    case(comm.allreduce(rank) == size * (size - 1) // 2, "parent after construction")
    for c in (half, same, rev, node):
        c.Free()


def isolation():
    color = rank % 2
    half = comm.Split(color, rank)
    dup = comm.Dup()
    n = 1 << 16
    pending_parent = comm.Iallreduce(np.full(n, float(rank)), parent_out := np.zeros(n), MPI.SUM)
    pending_dup = dup.Ibcast(dup_buf := (np.arange(100.0) if rank == 0 else np.zeros(100)), root=0)
    members = [r for r in range(size) if r % 2 == color]
    for it in range(5):
        if color == 0:
            out = np.zeros(n)
            half.Allreduce(np.full(n, float(rank + it)), out, MPI.SUM)
            case(np.all(out == sum(r + it for r in members)), f"even half Allreduce {it}")
            b = np.full(n // 2, float(it)) if half.rank == 0 else np.zeros(n // 2)
            half.Bcast(b, root=0)
            case(np.all(b == it), f"even half Bcast {it}")
        else:
            send = np.arange(half.size * 3, dtype="i8") + 1000 * rank + it
            recv = np.zeros_like(send)
            half.Alltoall(send, recv)
            expect = [1000 * members[s] + it + 3 * half.rank + k for s in range(half.size) for k in range(3)]
            case(list(recv) == expect, f"odd half Alltoall {it}")
            case(half.allgather((rank, it)) == [(m, it) for m in members], f"odd half allgather {it}")
            out = np.zeros(10)
            half.Iallreduce(np.full(10, 1.0), out, MPI.SUM).Wait()
            case(np.all(out == half.size), f"odd half Iallreduce {it}")
    pending_parent.Wait()
    pending_dup.Wait()
    case(np.all(parent_out == size * (size - 1) / 2), "parent Iallreduce pending during the halves' work")
    case(np.array_equal(dup_buf, np.arange(100.0)), "Dup Ibcast pending during the halves' work")
    # Same collective, same tag sequence, on parent and child at once: contexts keep them apart.
    a, b = np.zeros(4), np.zeros(4)
    r1 = comm.Iallreduce(np.full(4, 1.0), a, MPI.SUM)
    r2 = dup.Iallreduce(np.full(4, 2.0), b, MPI.SUM)
    MPI.Request.Waitall([r2, r1])
    case(np.all(a == size) and np.all(b == 2 * size), "parent and Dup Iallreduce in flight together")
    half.Free()
    dup.Free()


for fn in (construction, isolation):
    attempt(fn, fn.__name__)
finish()
