"""API pieces that need no job: Op semantics, Reduce_local, message specs, groups, COMM_SELF.

Expected values are mpi4py 4.1.2's (checked against it when these were written).
"""

from __future__ import annotations

import numpy as np
import pytest

from fmpi import MPI
from fmpi.api import collspecs
from fmpi.collectives import table


# ---------------------------------------------------------------------- Op
def test_op_on_objects_matches_mpi4py():
    assert MPI.SUM(3, 4) == 7 and MPI.SUM([1], [2]) == [1, 2]
    assert MPI.PROD(2, 3) == 6
    assert MPI.MAX("a", "b") == "b" and MPI.MIN(1, 2) == 1
    assert MPI.LAND(2, 3) is True and MPI.LOR(0, 3) is True and MPI.LXOR(1, 1) is False
    assert MPI.BAND(6, 3) == 2 and MPI.BOR(4, 1) == 5 and MPI.BXOR(6, 3) == 5
    assert MPI.MAXLOC((1, 2), (1, 1)) == (1, 1)  # equal values: the smaller index
    assert MPI.MINLOC((1, 5), (1, 2)) == (1, 2)
    assert MPI.MAXLOC((2, 5), (1, 2)) == (2, 5)
    assert MPI.REPLACE(3, 4) == 4 and MPI.NO_OP(3, 4) == 3
    calls = []
    op = MPI.Op.Create(lambda a, b, dt: calls.append(dt) or a * 10 + b, commute=False)
    assert op(3, 4) == 34 and calls == [None]  # objects: fn(x, y, None)
    assert not op.is_commutative and not op.is_predefined
    assert MPI.SUM.is_commutative and not MPI.REPLACE.is_commutative and not MPI.NO_OP.is_commutative


def test_reduce_local_predefined_and_user():
    x, y = np.arange(3.0), np.ones(3)
    MPI.SUM.Reduce_local(x, y)
    assert list(y) == [1.0, 2.0, 3.0]
    seen = {}

    def fn(inbuf, inoutbuf, datatype):
        seen["types"] = (type(inbuf), len(inbuf), datatype)
        a = np.frombuffer(inbuf, dtype="f8")
        b = np.frombuffer(inoutbuf, dtype="f8")
        b[:] = a * 10 + b

    op = MPI.Op.Create(fn, commute=False)
    y = np.ones(3)
    op.Reduce_local(np.arange(3.0), y)
    assert list(y) == [1.0, 11.0, 21.0]
    assert seen["types"][0] is MPI.buffer and seen["types"][1] == 24  # bytes, in an MPI.buffer as in mpi4py
    with pytest.raises(MPI.Exception) as info:
        MPI.BAND.Reduce_local(np.ones(2), np.ones(2))
    assert info.value.Get_error_class() == MPI.ERR_OP


@pytest.mark.parametrize("out_is", ["lower", "higher", "other"])
def test_combine_aliasing(out_is):
    """out may be either operand or a third array; the result is the same (user ops copy as needed)."""
    op = MPI.Op.Create(lambda i, io, dt: np.subtract(np.frombuffer(io, "i8"), np.frombuffer(i, "i8"), out=np.frombuffer(io, "i8")))
    for o in (op, MPI.SUM):
        lower, higher = np.array([5, 7], "i8"), np.array([1, 2], "i8")
        expect = higher - lower if o is op else lower + higher
        out = {"lower": lower, "higher": higher, "other": np.zeros(2, "i8")}[out_is]
        o.combine(lower, higher, out)
        assert list(out) == list(expect)


# ------------------------------------------------------------ message specs
def test_simple_specs():
    buf = np.arange(12, dtype="f8")
    m = collspecs.simple(buf, False)
    assert m.count == 12 and m.datatype.dtype == np.dtype("f8")
    m = collspecs.simple([buf, 3, MPI.DOUBLE], False)
    assert m.count == 3 and len(m.data()) == 24
    m = collspecs.simple([buf, (3, 2), MPI.DOUBLE], False)
    assert list(m.array()) == [2.0, 3.0, 4.0]
    m = collspecs.simple([buf, MPI.DOUBLE], False, blocks=4)
    assert m.count == 3
    with pytest.raises(ValueError, match="multiple of required number of blocks"):
        collspecs.simple(buf, False, blocks=5)
    m = collspecs.simple([bytearray(8), "i"], True)
    assert m.count == 2
    assert collspecs.in_place(MPI.IN_PLACE) and collspecs.in_place(None)


def test_vector_specs():
    buf = np.zeros(10, "i4")
    v = collspecs.vector(buf, False, 3)  # no counts: an even split, the first ranks one longer
    assert v.counts == [4, 3, 3] and list(v.layout.offsets) == [0, 16, 28]
    v = collspecs.vector([buf, [1, 2, 3]], False, 3)  # packed displacements
    assert list(v.layout.offsets) == [0, 4, 12]
    v = collspecs.vector([buf, ([1, 2, 3], [7, 0, 3]), MPI.INT], False, 3)
    assert list(v.layout.offsets) == [28, 0, 12] and list(v.layout.lengths) == [4, 8, 12]
    v = collspecs.vector([buf, 2, 3, MPI.INT], False, 3)  # an integer count and a stride
    assert list(v.layout.offsets) == [0, 12, 24]
    with pytest.raises(ValueError, match="expecting 3 counts"):
        collspecs.vector([buf, [1, 2]], False, 3)
    with pytest.raises(ValueError, match="reach byte"):
        collspecs.vector([buf, [4, 4, 4]], False, 3)


# ------------------------------------------------------------------ groups
def test_groups():
    g = MPI.Group([10, 11, 12, 13, 14], me=12)
    assert g.Get_size() == 5 and g.rank == 2
    evens = g.Incl([0, 2, 4])
    assert evens.rank == 1 and evens.size == 3
    assert g.Excl([0, 2, 4]).rank == MPI.UNDEFINED
    assert g.Translate_ranks([0, 1, 2, 4], evens) == [0, MPI.UNDEFINED, 1, 2]
    assert g.Range_incl([(4, 0, -2)]).Compare(evens) == MPI.SIMILAR
    assert g.Range_incl([(0, 4, 2)]).Compare(evens) == MPI.IDENT
    assert g.Range_excl([(1, 3, 2)]).Compare(evens) == MPI.IDENT
    assert MPI.Group.Union(evens, g).size == 5 and MPI.Group.Union(evens, g).rank == 1
    assert MPI.Group.Intersection(g, evens).Compare(evens) == MPI.IDENT
    assert MPI.Group.Difference(g, evens).size == 2
    assert g.Compare(evens) == MPI.UNEQUAL
    assert MPI.GROUP_EMPTY.size == 0 and MPI.GROUP_EMPTY.rank == MPI.UNDEFINED
    assert not MPI.GROUP_NULL and MPI.GROUP_EMPTY
    with pytest.raises(MPI.Exception):
        g.Incl([0, 0])
    with pytest.raises(MPI.Exception):
        g.Incl([5])


# --------------------------------------------------------------- COMM_SELF
def test_comm_self_collectives():
    comm = MPI.COMM_SELF
    obj = {"a": [1]}
    got = comm.bcast(obj)
    assert got == obj and got is not obj  # a copy, as mpi4py
    assert comm.allreduce(obj["a"]) == [1] and comm.exscan(5) is None and comm.scan(5) == 5
    buf = np.arange(4.0)
    comm.Exscan(MPI.IN_PLACE, buf)
    assert list(buf) == [0.0, 1.0, 2.0, 3.0]  # rank 0's buffer is left alone
    out = np.zeros(4)
    comm.Allreduce(buf, out, MPI.MAX)
    assert list(out) == list(buf)
    with pytest.raises(ValueError, match="mismatch in send count"):
        comm.Allreduce(np.zeros(3), np.zeros(4))
    with pytest.raises(MPI.Exception) as info:
        comm.Bcast(buf, root=1)
    assert info.value.Get_error_class() == MPI.ERR_ROOT
    req = comm.Iallreduce(MPI.IN_PLACE, buf, MPI.SUM)
    assert isinstance(req, MPI.Request) and req.Wait()
    dup = comm.Dup()
    assert dup.Compare(comm) == MPI.CONGRUENT and dup.Get_group().Compare(comm.Get_group()) == MPI.IDENT
    assert comm.Split(MPI.UNDEFINED) == MPI.COMM_NULL  # (equal, not the same object: as in mpi4py)
    dup.Free()


def test_a_repeated_allreduce_picks_its_algorithm_again_when_the_table_changes():
    """The remembered plan (api/repeated_calls.py) is only reused while the table's settings stay."""
    comm = MPI.COMM_SELF.Dup()
    send, recv = np.arange(4.0), np.zeros(4)
    comm.Allreduce(send, recv, MPI.SUM)
    memo = comm._allreduce_memo
    comm.Allreduce(send, recv, MPI.SUM)
    assert comm._allreduce_memo is memo  # the same call again: reused
    table.configure(forced="allreduce:ring")
    try:
        send += 1
        comm.Allreduce(send, recv, MPI.SUM)
        assert list(recv) == [1.0, 2.0, 3.0, 4.0]
        assert comm._allreduce_memo is not memo
        assert comm._allreduce_memo.algorithm == "ring"
    finally:
        table.reset()
    comm.Allreduce(send, recv, MPI.SUM)
    assert comm._allreduce_memo.algorithm == "recursive_doubling"
    big_send, big_recv = np.ones(100_000), np.zeros(100_000)  # too large to remember
    last = comm._allreduce_memo
    comm.Allreduce(big_send, big_recv, MPI.SUM)
    assert comm._allreduce_memo is last and big_recv.sum() == 100_000
    comm.Free()
