"""mpi4py message specifications -> contiguous byte views.

Accepted forms (as in mpi4py): ``buf``, ``[buf, datatype]``,
``[buf, count, datatype]``, ``[buf, (count, displ), datatype]`` and
``[buf, count, displ, datatype]``, where ``buf`` is a numpy array or any
object with the buffer protocol (bytearray, bytes for sending, mmap,
memoryview, array.array), or None for an empty message. Counts and displacements are in elements of the
datatype. Nothing is copied: the result is a view on the user's memory, unless the datatype leaves gaps
(a vector, a subarray, ...): then a send's elements are packed into a buffer of their own, and a receive
gets a staging buffer and the function that unpacks it (``staging``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import dlpack, staging
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
        if not obj.flags.c_contiguous:
            raise err.UnusableBuffer("buffer is not C-contiguous; pass np.ascontiguousarray(buf)")
        if writable and not obj.flags.writeable:
            raise err.UnusableBuffer("receive buffer is read-only")
        flat = obj.reshape(-1).view(np.uint8)
        return memoryview(flat), from_dtype(obj.dtype)
    try:
        view = memoryview(obj)
    except TypeError:
        if hasattr(obj, "__dlpack__"):
            view, dtype = dlpack.host_view(obj)
            return view, from_dtype(dtype)
        array = _foreign_array(obj)
        if array is None:
            raise err.Exception(
                err.ERR_BUFFER, f"{type(obj).__name__} is not a buffer (use a numpy array, bytearray, memoryview or mmap)"
            ) from None
        if not array.flags.c_contiguous:
            raise err.UnusableBuffer("buffer is not C-contiguous")
        if writable and not array.flags.writeable:
            raise err.UnusableBuffer(f"receive buffer ({type(obj).__name__}) is read-only")
        return memoryview(array.reshape(-1).view(np.uint8)), from_dtype(array.dtype)
    if not view.c_contiguous:
        raise err.UnusableBuffer("buffer is not C-contiguous")
    if writable and view.readonly:
        raise err.UnusableBuffer(f"receive buffer ({type(obj).__name__}) is read-only")
    datatype = from_typechar(view.format.lstrip("@=<>!")) or DATATYPES["BYTE"]
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view, datatype


def _foreign_array(obj: Any) -> np.ndarray | None:
    """A numpy view of host memory that `obj` exports through an array interface (mpi4py takes
    those too; a ``__cuda_array_interface__`` with a host pointer, as test suites use, has the same
    layout as numpy's), or None if it exports none."""
    iface = getattr(obj, "__cuda_array_interface__", None) or getattr(obj, "__array_interface__", None)
    if isinstance(iface, dict):
        return np.asarray(type("ArrayInterface", (), {"__array_interface__": {**iface, "version": 3}})())
    return None


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


def message(spec: Any, writable: bool) -> Message:
    """Parse one message spec (see module docstring)."""
    datatype: Datatype | None = None
    count: int | None = None
    displ = 0
    if isinstance(spec, (list, tuple)):
        if not 1 <= len(spec) <= 4:
            raise err.Exception(err.ERR_ARG, f"message spec must have 1 to 4 items, not {len(spec)}")
        buf, *rest = spec
        if rest and isinstance(rest[-1], Datatype):
            datatype = rest.pop()
        elif rest and isinstance(rest[-1], str):  # mpi4py accepts typecodes too
            datatype = from_typechar(rest.pop())
        if len(rest) == 1 and isinstance(rest[0], (list, tuple)):
            count, displ = rest[0]
        elif len(rest) == 1:
            count = rest[0]
        elif len(rest) == 2:
            count, displ = rest
        elif rest:
            raise err.Exception(err.ERR_ARG, f"cannot parse message spec {spec!r}")
    else:
        buf = spec
    if buf is BOTTOM and isinstance(datatype, Datatype) and datatype:  # absolute addresses (Get_address)
        count = count or 0  # (BOTTOM holds nothing of its own: no count, no elements, as in mpi4py)
        view, base = staging.at_addresses(displ * datatype._t.extent, count, datatype._t)
        return _gappy(view, count, 0, datatype, writable, base)
    view, implied = byte_view(buf, writable)
    datatype = datatype or implied
    record = datatype._t
    if datatype and not record.contiguous:
        return _gappy(view, count, displ, datatype, writable)
    size = record.size
    if size == 0:
        raise err.Exception(err.ERR_TYPE, f"datatype {datatype.name} has no size")
    start = displ * size
    if count is None:
        count = (len(view) - start) // size
    if count < 0 or displ < 0:
        raise err.Exception(err.ERR_COUNT, f"negative count or displacement in message spec ({count}, {displ})")
    end = start + count * size
    if end > len(view):
        raise err.Exception(
            err.ERR_BUFFER, f"message of {count} x {datatype.name} at displacement {displ} overruns a {len(view)}-byte buffer"
        )
    return Message(view[start:end], count, datatype)


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
