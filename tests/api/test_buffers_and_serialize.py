"""Message specs, datatypes and the object serializer (units; compared with what mpi4py documents)."""

import array
import mmap

import numpy as np
import pytest

from fmpi.api import exceptions as err
from fmpi.api.buffers import message
from fmpi.api.datatypes import DATATYPES, from_dtype
from fmpi.api.status import Status
from fmpi.wire import pickle_oob as serialize

D = DATATYPES


def test_plain_buffers_take_their_element_type():
    assert message(np.zeros(5, "f4"), False).datatype is D["FLOAT"]
    assert message(np.zeros(5, "i8"), False).datatype.Get_size() == 8
    assert message(bytearray(7), True).datatype is D["BYTE"]
    assert message(array.array("d", [1, 2]), False).datatype is D["DOUBLE"]
    m = message(np.zeros((3, 4), "c16"), False)
    assert (m.count, m.nbytes) == (12, 192)


def test_specs_with_count_and_displacement_cover_the_right_bytes():
    a = np.arange(10, dtype="d")
    m = message([a, (3, 2), D["DOUBLE"]], False)
    assert m.as_array().tolist() == [2.0, 3.0, 4.0]
    m = message([a, 4, D["DOUBLE"]], False)
    assert m.as_array().tolist() == [0.0, 1.0, 2.0, 3.0]
    m = message([a, 2, 7, D["DOUBLE"]], False)
    assert m.as_array().tolist() == [7.0, 8.0]
    # reinterpretation is allowed, as in MPI: 10 doubles are 80 bytes
    assert message([a, D["BYTE"]], False).count == 80


def test_views_alias_user_memory():
    buf = np.zeros(4, "i4")
    view = message(buf, True).view
    view[:4] = bytes([1, 0, 0, 0])
    assert buf[0] == 1
    mm = mmap.mmap(-1, 16)
    message([mm, D["BYTE"]], True).view[0:2] = b"hi"
    assert mm[:2] == b"hi"


@pytest.mark.parametrize(
    "spec, writable, code",
    [
        (np.zeros(10)[::2], False, err.ERR_BUFFER),  # not contiguous
        (b"read only", True, err.ERR_BUFFER),
        (np.zeros(3), True, None),
        ([np.zeros(3), 5, D["DOUBLE"]], False, err.ERR_BUFFER),  # overruns
        ([np.zeros(3), -1, D["DOUBLE"]], False, err.ERR_COUNT),
        (object(), False, err.ERR_BUFFER),
    ],
)
def test_bad_specs_raise_mpi_exceptions(spec, writable, code):
    if code is None:
        assert message(spec, writable).nbytes == 24
        return
    with pytest.raises(err.Exception) as info:
        message(spec, writable)
    assert info.value.Get_error_class() == code


def test_unusable_buffers_are_buffer_errors_as_in_mpi4py_and_mpi_errors():
    a = np.zeros(3)
    a.flags.writeable = False
    for spec, writable, text in ((a, True, "read-only"), (b"xyz", True, "read-only"), (np.zeros(6)[::2], False, "C-contiguous")):
        with pytest.raises(BufferError, match=text) as info:
            message(spec, writable)
        assert isinstance(info.value, err.Exception) and info.value.Get_error_class() == err.ERR_BUFFER


def test_pair_types_match_c_struct_layout():
    assert D["DOUBLE_INT"].Get_size() == 16  # double + int + padding, like struct {double; int;}
    assert D["FLOAT_INT"].Get_size() == 8
    assert from_dtype(np.dtype("f8")) is D["DOUBLE"]


def test_status_counts_in_elements():
    st = Status()
    st._set(2, 9, 24)
    assert (st.Get_source(), st.Get_tag(), st.Get_count(D["DOUBLE"]), st.Get_count()) == (2, 9, 3, 24)
    assert st.Get_count(D["INT64_T"]) == 3 and st.Get_count(D["DOUBLE_INT"]) == -32766  # not a whole number


def test_large_arrays_travel_out_of_band_and_come_back_equal():
    obj = {"big": np.arange(100_000, dtype="f8"), "small": np.arange(3), "text": "x" * 10}
    parts = serialize.dumps(obj)
    assert len(parts) == 3  # head, pickle, one out-of-band buffer
    assert parts[2].nbytes == 800_000
    assert np.shares_memory(np.frombuffer(parts[2], dtype="u1"), obj["big"])  # sent from the array itself
    joined = bytearray(b"".join(bytes(p) for p in parts))
    back = serialize.loads(joined)
    assert np.array_equal(back["big"], obj["big"]) and back["text"] == obj["text"]
    assert np.shares_memory(back["big"], np.frombuffer(joined, dtype="u1"))  # no copy on receive


def test_small_objects_stay_in_band():
    parts = serialize.dumps([1, "two", None])
    assert len(parts) == 2
    assert serialize.loads(b"".join(bytes(p) for p in parts)) == [1, "two", None]


def test_mpi_exceptions_compare_with_error_codes_as_in_mpi4py():
    e = err.Exception(err.ERR_TRUNCATE, "too long")
    assert e == err.ERR_TRUNCATE and e != err.ERR_BUFFER and int(e) == err.ERR_TRUNCATE
    assert len({e, e}) == 1  # hashable, as mpi4py's
    assert err.UnusableBuffer("read-only") == err.ERR_BUFFER
