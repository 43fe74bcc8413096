"""Derived datatypes in one process: every constructor's elements land where numpy says they are
(pack, unpack, a message to COMM_SELF), and bad uses fail with one clear MPI error."""

from __future__ import annotations

import numpy as np
import pytest

from fmpi import MPI

N = 24


def _cases():
    """(name, datatype, count, numpy's index of the elements the message covers, in packed order)."""
    i = np.arange(N * N)
    grid = i.reshape(N, N)
    yield "vector", MPI.DOUBLE.Create_vector(5, 3, 7), 2, np.concatenate(
        [(np.arange(5)[:, None] * 7 + np.arange(3)).ravel() + e * (4 * 7 + 3) for e in range(2)])
    yield "subarray-C", MPI.DOUBLE.Create_subarray([N, N], [5, 7], [3, 9]), 1, grid[3:8, 9:16].ravel()
    yield "subarray-F", MPI.DOUBLE.Create_subarray([N, N], [5, 7], [3, 9], order=MPI.ORDER_F), 1, \
        grid[9:16, 3:8].ravel()
    blocks = sorted(np.random.default_rng(1).choice(N * N // 4, 40, replace=False) * 3)
    yield "indexed-scattered", MPI.DOUBLE.Create_indexed([2] * 40, blocks), 1, \
        (np.array(blocks)[:, None] + np.arange(2)).ravel()
    yield "indexed-regular", MPI.DOUBLE.Create_indexed_block(3, list(range(0, 90, 9))), 2, \
        np.concatenate([(np.arange(0, 90, 9)[:, None] + np.arange(3)).ravel() + e * 84 for e in range(2)])
    yield "resized-columns", MPI.DOUBLE.Create_vector(N, 1, N).Create_resized(0, 8), 4, grid[:, :4].T.ravel()
    yield "darray-cyclic", MPI.DOUBLE.Create_darray(4, 3, [N, N], [MPI.DISTRIBUTE_CYCLIC] * 2,
                                                    [MPI.DISTRIBUTE_DFLT_DARG] * 2, [2, 2]), 1, grid[1::2, 1::2].ravel()
    yield "hindexed-nested", MPI.DOUBLE.Create_vector(2, 1, 3).Create_hindexed([1, 2], [0, 64]), 1, \
        np.array([0, 3, 8, 11, 12, 15])


@pytest.mark.parametrize("name,datatype,count,index", list(_cases()), ids=[c[0] for c in _cases()])
def test_elements_are_where_numpy_puts_them(name, datatype, count, index):
    datatype.Commit()
    source = np.arange(N * N, dtype="d")
    received = np.zeros(N * N)
    MPI.COMM_SELF.Sendrecv([source, count, datatype], 0, 0, [received, count, datatype], 0, 0)
    assert datatype.size * count == 8 * len(index)
    np.testing.assert_array_equal(received[index], source[index])
    untouched = np.ones(N * N, bool)
    untouched[index] = False
    assert not received[untouched].any()
    # Pack takes as many elements as `count` extents of buffer hold: only where they cover the data
    if datatype.lb != 0 or datatype.true_ub + (count - 1) * datatype.extent > count * datatype.extent:
        return
    packed = bytearray(datatype.Pack_size(count, MPI.COMM_SELF))
    whole = np.zeros(max(N * N, datatype.extent * count // 8))
    whole[: N * N] = source
    assert datatype.Pack(whole[: datatype.extent * count // 8], packed, 0, MPI.COMM_SELF) == len(packed)
    np.testing.assert_array_equal(np.frombuffer(packed), source[index])
    unpacked = np.zeros(datatype.extent * count // 8)
    datatype.Unpack(packed, 0, unpacked, MPI.COMM_SELF)
    np.testing.assert_array_equal(unpacked[index], source[index])


@pytest.mark.parametrize("name,datatype,count,index", list(_cases()), ids=[c[0] for c in _cases()])
def test_collective_stages_and_unpacks(name, datatype, count, index):
    datatype.Commit()
    source = np.arange(N * N, dtype="d")
    out = np.zeros(N * N)
    MPI.COMM_SELF.Allgather([source, count, datatype], [out, count, datatype])
    np.testing.assert_array_equal(out[index], source[index])
    out2 = np.zeros(N * N)
    MPI.COMM_SELF.Alltoallw([source, [count], [0], [datatype]], [out2, [count], [0], [datatype]])
    np.testing.assert_array_equal(out2, out)


def test_elements_before_the_buffer_are_refused():
    """A negative stride reaches before its origin: fmpi sees only the memory of the object passed."""
    t = MPI.DOUBLE.Create_vector(3, 2, -5).Commit()
    assert t.Get_true_extent() == (-80, 96)
    with pytest.raises(MPI.Exception) as caught:
        MPI.COMM_SELF.Isend([np.arange(20.0)[10:], 1, t], 0)
    assert caught.value.Get_error_class() == MPI.ERR_BUFFER


def test_pack_unpack_round_trip_of_a_struct():
    record = np.dtype([("i", "i4"), ("x", "f8"), ("c", "S3")], align=True)
    data = np.zeros(5, record)
    data["i"], data["x"], data["c"] = range(5), np.linspace(0, 1, 5), [b"ab", b"cd", b"ef", b"gh", b"ij"]
    t = MPI.Datatype.Create_struct([1, 1, 3], [0, 8, 16], [MPI.INT, MPI.DOUBLE, MPI.CHAR]).Create_resized(0, record.itemsize)
    t.Commit()
    packed = bytearray(t.Pack_size(5, MPI.COMM_SELF))
    assert len(packed) == 5 * 15
    assert t.Pack(data, packed, 0, MPI.COMM_SELF) == len(packed)
    back = np.zeros(5, record)
    assert t.Unpack(packed, 0, back, MPI.COMM_SELF) == len(packed)
    assert back.tolist() == data.tolist()


def test_bottom_with_absolute_addresses():
    a, b = np.arange(4, dtype="i"), np.arange(3, dtype="d") + 0.5
    t = MPI.Datatype.Create_struct([4, 3], [MPI.Get_address(a), MPI.Get_address(b)], [MPI.INT, MPI.DOUBLE]).Commit()
    x, y = np.zeros(4, "i"), np.zeros(3)
    u = MPI.Datatype.Create_struct([4, 3], [MPI.Get_address(x), MPI.Get_address(y)], [MPI.INT, MPI.DOUBLE]).Commit()
    MPI.COMM_SELF.Sendrecv([MPI.BOTTOM, 1, t], 0, 0, [MPI.BOTTOM, 1, u], 0, 0)
    assert x.tolist() == a.tolist() and y.tolist() == b.tolist()


def test_uncommitted_and_overrunning_messages_fail_clearly():
    t = MPI.DOUBLE.Create_vector(2, 3, 7)
    with pytest.raises(MPI.Exception) as caught:
        MPI.COMM_SELF.Isend([np.zeros(100), 1, t], 0)
    assert caught.value.Get_error_class() == MPI.ERR_TYPE and "Commit" in str(caught.value)
    t.Commit()
    with pytest.raises(MPI.Exception) as caught:
        MPI.COMM_SELF.Isend([np.zeros(8), 2, t], 0)
    assert caught.value.Get_error_class() == MPI.ERR_BUFFER


def test_freed_handle_is_null_and_contents_survive():
    inner = MPI.DOUBLE.Create_vector(2, 1, 2)
    outer = inner.Create_contiguous(3)
    inner.Free()
    assert inner == MPI.DATATYPE_NULL
    base, combiner, params = outer.decode()
    assert combiner == "CONTIGUOUS" and params == {"count": 3}
    assert base.decode()[1:] == ("VECTOR", {"count": 2, "blocklength": 1, "stride": 2})
    with pytest.raises(MPI.Exception):
        MPI.INT.Free()


def test_bottom_without_addresses_is_refused_not_a_crash():
    MPI.COMM_SELF.Sendrecv([MPI.BOTTOM, "B"], 0, 0, [MPI.BOTTOM, "B"], 0, 0)  # no count: nothing, as in mpi4py
    t = MPI.Datatype.Create_struct([4], [16], [MPI.INT]).Commit()
    with pytest.raises(MPI.Exception) as caught:
        MPI.COMM_SELF.Isend([MPI.BOTTOM, 1, t], 0)
    assert caught.value.Get_error_class() == MPI.ERR_BUFFER and "Get_address" in str(caught.value)
