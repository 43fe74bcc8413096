"""mpi4py message specifications -> contiguous byte views.

Accepted forms (as in mpi4py): ``buf``, ``[buf, datatype]``,
``[buf, count, datatype]``, ``[buf, (count, displ), datatype]`` and
``[buf, count, displ, datatype]`` (count, displacement and datatype may each be None: inferred), where
``buf`` is a numpy array (C or Fortran order), any object with the buffer protocol (bytearray, bytes for
sending, mmap, memoryview, array.array), a DLPack or CUDA-array-interface exporter (``dlpack``, ``cai``),
or None for an empty message. Counts and displacements are in elements of the datatype; bad ones are
refused with mpi4py's errors (ValueError, KeyError for an unknown typecode, TypeError for a non-buffer),
as MPI.Exceptions too. Nothing is copied: the result is a view on the user's memory, unless the datatype leaves gaps
(a vector, a subarray, ...): then a send's elements are packed into a buffer of their own, and a receive
gets a staging buffer and the function that unpacks it (``staging``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import cai, dlpack, staging
from .spec_errors import BadSpec, NotABuffer
from . import exceptions as err
from .constants import BOTTOM
from .datatypes import DATATYPES, Datatype, from_dtype, from_typechar


@dataclass(frozen=True, slots=True)
class Message:
    view: memoryview  # 1-D, format 'B', exactly the bytes the message covers (packed, for gappy datatypes)
    count: int
    datatype: Datatype
    unpack: staging.Unpack | None = None  # a receive into a staging buffer: call with the bytes that arrived

    @property
    def nbytes(self) -> int:
        return len(self.view)

    def as_array(self) -> np.ndarray:
        """The message as a numpy array of its datatype (no copy)."""
        return np.frombuffer(self.view, dtype=self.datatype.dtype) if self.datatype.dtype is not None else np.empty(0)


def byte_view(obj: Any, writable: bool) -> tuple[memoryview, Datatype]:
    """A flat byte view of `obj` and the datatype its element type implies."""
    if obj is None:  # mpi4py: None (or [None, datatype]) is an empty message, in either direction
        return memoryview(bytearray()), DATATYPES["BYTE"]
    if isinstance(obj, np.ndarray):
        if writable and not obj.flags.writeable:
            raise err.UnusableBuffer("receive buffer is read-only")
        return _array_bytes(obj), from_dtype(obj.dtype)
    try:
        view = memoryview(obj)
    except TypeError:
        exported = foreign(obj)
        if writable and exported.view.readonly:
            raise err.UnusableBuffer(f"receive buffer ({type(obj).__name__}) is read-only") from None
        return exported.view, DATATYPES["BYTE"] if exported.dtype is None else from_dtype(exported.dtype)
    if not view.c_contiguous:
        raise err.UnusableBuffer("buffer is not C-contiguous")
    if writable and view.readonly:
        raise err.UnusableBuffer(f"receive buffer ({type(obj).__name__}) is read-only")
    datatype = from_typechar(view.format.lstrip("@=<>!")) or DATATYPES["BYTE"]
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view, datatype


def _array_bytes(array: np.ndarray) -> memoryview:
    """The bytes of a C- or Fortran-contiguous array in memory order (mpi4py takes either order)."""
    if array.flags.c_contiguous:
        return memoryview(array.reshape(-1).view(np.uint8))
    if array.flags.f_contiguous:
        return memoryview(array.T.reshape(-1).view(np.uint8))
    raise err.UnusableBuffer("buffer is not C-contiguous (nor Fortran-contiguous); pass np.ascontiguousarray(buf)")


def foreign(obj: Any) -> dlpack.Exported:
    """The memory of an object without the buffer protocol that exports it otherwise, in mpi4py's order:
    DLPack, then the CUDA array interface; numpy's array interface too. TypeError if it exports none."""
    if hasattr(obj, "__dlpack__"):
        return dlpack.export(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return cai.export(obj)
    iface = getattr(obj, "__array_interface__", None)
    if isinstance(iface, dict):
        array = np.asarray(type("ArrayInterface", (), {"__array_interface__": {**iface, "version": 3}})())
        return dlpack.Exported(_array_bytes(array), array.dtype, True)
    raise NotABuffer(f"a bytes-like object is required, not '{type(obj).__name__}' "
                    "(use a numpy array, bytearray, memoryview or mmap)")


def message_view(spec: Any, writable: bool) -> memoryview:
    """``message(spec, writable).view``, with a shortcut for the common case: a whole numpy array or bytearray."""
    kind = type(spec)
    if kind is np.ndarray or kind is bytearray:
        view = memoryview(spec)
        if view.c_contiguous and not (writable and view.readonly):
            if view.format == "B" and view.ndim == 1:
                return view
            try:
                return view.cast("B")
            except TypeError:
                pass  # a structured dtype: the general path knows it
    return message(spec, writable).view


def receive_target(spec: Any) -> tuple[memoryview, staging.Unpack | None]:
    """Where a receive into `spec` puts its bytes, and what must unpack them afterwards (None: nothing)."""
    kind = type(spec)
    if kind is np.ndarray or kind is bytearray:
        return message_view(spec, True), None
    msg = message(spec, True)
    return msg.view, msg.unpack


def _parse(spec: Any) -> tuple[Any, Any, Any, Any]:
    """(buffer, count, displacement, datatype) of a message spec, each None where the spec leaves it
    out; a 2-item spec's second item is a datatype (or typecode), a (count, displ) pair or a count."""
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    if len(spec) == 1:  # (fmpi also takes [buf], which mpi4py refuses)
        return spec[0], None, None, None
    if len(spec) == 2:
        buf, count = spec
        if isinstance(count, (Datatype, str)):
            return buf, None, None, count
    elif len(spec) == 3:
        buf, count, datatype = spec
    elif len(spec) == 4:
        return spec[0], spec[1], spec[2], spec[3]
    else:
        raise BadSpec(err.ERR_ARG, f"message: expecting 2 to 4 items, not {len(spec)}")
    if isinstance(count, (list, tuple)):
        count, displ = count
        return buf, count, displ, datatype if len(spec) == 3 else None
    return buf, count, None, datatype if len(spec) == 3 else None


def _datatype(spec: Any) -> Datatype | None:
    """The datatype a spec names: a Datatype, an mpi4py typecode (KeyError if unknown, as in mpi4py), or None."""
    if spec is None or isinstance(spec, Datatype):
        return spec
    found = from_typechar(spec)
    if found is None:
        raise KeyError(spec)
    return found


def message(spec: Any, writable: bool) -> Message:
    """Parse one message spec (see module docstring), refusing what mpi4py refuses with its errors."""
    buf, count, displ, datatype = _parse(spec)
    datatype = _datatype(datatype)
    displ = displ or 0
    if buf is BOTTOM and isinstance(datatype, Datatype) and datatype:  # absolute addresses (Get_address)
        count = count or 0  # (BOTTOM holds nothing of its own: no count, no elements, as in mpi4py)
        view, base = staging.at_addresses(displ * datatype._t.extent, count, datatype._t)
        return _gappy(view, count, 0, datatype, writable, base)
    view, implied = byte_view(buf, writable)
    if datatype is None:
        if implied.dtype is not None and not implied.dtype.isnative:
            raise err.UnusableBuffer(f"buffer of non-native byte order ({implied.dtype.str}) without a datatype")
        datatype = implied
    _check_counts(buf, count, displ, datatype, len(view))
    if not datatype:
        return Message(view[0:0], 0, datatype)
    record = datatype._t
    if not record.contiguous:
        return _gappy(view, count, displ, datatype, writable)
    size = record.size
    if size == 0:
        raise err.Exception(err.ERR_TYPE, f"datatype {datatype.name} has no size")
    start = displ * size
    if count is None:
        count = (len(view) - start) // size
    end = start + count * size
    if end > len(view):
        raise err.Exception(
            err.ERR_BUFFER, f"message of {count} x {datatype.name} at displacement {displ} overruns a {len(view)}-byte buffer"
        )
    return Message(view[start:end], count, datatype)


def _check_counts(buf: Any, count: int | None, displ: int, datatype: Datatype, length: int) -> None:
    """mpi4py's checks of a message's count and displacement against its buffer (ValueError)."""
    if displ < 0:
        raise BadSpec(err.ERR_ARG, f"message: negative displacement {displ}")
    extent = datatype._t.extent if datatype else 0
    if displ > 0:
        if not datatype or extent <= 0:
            raise BadSpec(err.ERR_TYPE, f"message: cannot handle displacement, datatype {datatype.name} has extent {extent}")
        if displ * extent > length:
            raise BadSpec(err.ERR_ARG, f"message: displacement {displ} out of bounds, number of datatype entries {length // extent}")
        length -= displ * extent
    if count is not None:
        if count < 0:
            raise BadSpec(err.ERR_COUNT, f"message: negative count {count}")
        if count > 0 and buf is None:
            raise BadSpec(err.ERR_BUFFER, f"message: buffer is None but count is {count}")
        if count > 0 and not datatype:
            raise BadSpec(err.ERR_TYPE, "message: datatype is null")
    elif length > 0:
        if not datatype or extent <= 0:
            raise BadSpec(err.ERR_TYPE, f"message: cannot infer count, datatype {datatype.name} has extent {extent}")
        if length % extent:
            raise BadSpec(err.ERR_COUNT, f"message: cannot infer count, buffer length {length} is not a multiple of "
                             f"datatype extent {extent}")


def _gappy(view: memoryview, count: int | None, displ: int, datatype: Datatype, writable: bool, base: int = 0) -> Message:
    """A message of a datatype whose elements are not plain consecutive bytes (see the module docstring)."""
    record = datatype._t
    staging.check_usable(record)
    base += displ * record.extent
    if count is None:
        count = (len(view) - base) // record.extent if record.extent > 0 else 0
    if count < 0 or displ < 0:
        raise err.Exception(err.ERR_COUNT, f"negative count or displacement in message spec ({count}, {displ})")
    if writable:
        target, unpack = staging.receive(view, base, count, record)
        return Message(target, count, datatype, unpack)
    return Message(staging.pack(view, base, count, record), count, datatype)
