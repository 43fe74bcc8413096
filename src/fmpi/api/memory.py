"""``MPI.buffer`` (alias ``MPI.memory``): raw bytes, fmpi's own (``allocate``, ``Alloc_mem``) or another object's
(``buffer(obj)``, ``frombuffer``, ``fromaddress``), with mpi4py's interface.

Python 3.11 lets a class written in Python export the buffer protocol only by deriving from a builtin that
does, and only numpy's array can view memory it does not own, read-only or not: so ``buffer`` is a 1-D
uint8 array, with mpi4py's sequence behavior (ints for items, slices that are buffers, no stepping) and
identity for ``==``. Memory of a device (DLPack or CUDA-array-interface exporters that are not on the
CPU) is sent and received by address but not indexed, as in mpi4py.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import exceptions as err
from .constants import AddressConstant
from .dlpack import address_view
from .request import Request

_NO_ARGUMENT = object()


def _not_cpu() -> BufferError:
    return BufferError("buffer is not CPU-accessible")


class buffer(np.ndarray):
    """Memory buffer (mpi4py's ``MPI.buffer``, also ``MPI.memory``): a byte array over some memory."""
    _owner: Any = None
    _host: bool = True
    _released: bool = False
    _itemsize: int = 1  # the exporter's item size (mpi4py reports it; the format stays "B")

    def __new__(cls, obj: Any = _NO_ARGUMENT) -> buffer:
        """``buffer()``: no memory; ``buffer(obj)``: the memory `obj` exports, read-only if it is."""
        if obj is _NO_ARGUMENT:
            made = cls._of(memoryview(bytearray()), None, True)
            made._released = True  # no memory at all: address 0, as mpi4py's
            return made
        return cls.frombuffer(obj, readonly=False)

    @classmethod
    def _of(cls, view: memoryview, owner: Any, host: bool) -> buffer:
        made = np.frombuffer(view, dtype=np.uint8).view(cls)
        made._owner, made._host = owner, host
        return made

    def __array_finalize__(self, parent: Any) -> None:
        self._owner = getattr(parent, "_owner", None)
        self._host = getattr(parent, "_host", True)
        self._itemsize = getattr(parent, "_itemsize", 1)

    @staticmethod
    def allocate(nbytes: int, clear: bool = False) -> buffer:
        """
        Allocate `nbytes` bytes of fmpi's memory, always zeroed (Python has no uninitialized memory to give)."""
        nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"expecting non-negative size, got {nbytes}")
        memory = memoryview(bytearray(max(nbytes, 1)))[:nbytes]  # (an empty allocation has an address too)
        return buffer._of(memory, memory, True)

    @staticmethod
    def frombuffer(obj: Any, readonly: bool = False) -> buffer:
        """
        Return a buffer on the memory of `obj` (buffer protocol, DLPack, CUDA array interface); TypeError if none."""
        from .buffers import foreign

        if obj is None:
            raise TypeError("a bytes-like object is required, not 'NoneType'")
        try:
            view, host = memoryview(obj), True
        except TypeError:
            exported = foreign(obj)
            view, host = exported.view, exported.host
        if not view.c_contiguous:
            raise BufferError("buffer is not contiguous")
        itemsize = view.itemsize
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        made = buffer._of(view.toreadonly() if readonly else view, obj, host)
        made._itemsize = itemsize
        return made

    @staticmethod
    def fromaddress(address: int, nbytes: int, readonly: bool = False) -> buffer:
        """
        Return a buffer on the `nbytes` bytes at `address` (the caller keeps them alive)."""
        address, nbytes = operator.index(address), operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"expecting non-negative buffer length, got {nbytes}")
        if address == 0 and nbytes > 0:
            raise ValueError("expecting non-NULL address")
        return buffer._of(address_view(address, nbytes, readonly, None), None, True)

    @property
    def address(self) -> int:
        return 0 if self._released else int(self.ctypes.data)

    @property
    def obj(self) -> Any:
        return None if self._released else self._owner

    @property
    def nbytes(self) -> int:
        return 0 if self._released else self.size

    @property
    def readonly(self) -> bool:
        return not self._released and not self.flags.writeable

    format = "B"

    @property
    def itemsize(self) -> int:
        return self._itemsize

    def release(self) -> None:
        """
        Forget the memory (it stays alive while other views of it do)."""
        self._released, self._owner = True, None

    def toreadonly(self) -> buffer:
        """
        Return a read-only buffer on the same memory."""
        made = self.view(buffer)
        made.flags.writeable = False
        return made

    def cast(self, format: str, shape: Any = None) -> memoryview:  # noqa: A002 - mpi4py's name
        """
        Return a memoryview of the memory cast to `format` (and `shape`)."""
        if not self._host:
            raise _not_cpu()
        view = memoryview(self)
        return view.cast(format) if shape is None else view.cast(format, shape)

    def tobytes(self, order: Any = None) -> bytes:
        """
        Return a copy of the memory as bytes (`order` is accepted and ignored, as the memory is flat)."""
        if not self._host:
            raise _not_cpu()
        return bytes(memoryview(self))

    def __getitem__(self, key: Any) -> Any:
        if not self._host:
            raise _not_cpu()
        if isinstance(key, slice):
            return super().__getitem__(_plain(key, len(self)))
        return int(super().__getitem__(_index(key, len(self))))

    def __setitem__(self, key: Any, value: Any) -> None:
        if not self._host:
            raise _not_cpu()
        if not self.flags.writeable:
            raise TypeError("buffer is read-only")
        if not isinstance(key, slice):
            super().__setitem__(_index(key, len(self)), value)
            return
        key = _plain(key, len(self))
        if not isinstance(value, int):
            value = np.frombuffer(memoryview(value).cast("B"), dtype=np.uint8)
            if len(value) != len(range(*key.indices(len(self)))):
                raise ValueError("buffer slice assignment is wrong size")
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        raise NotImplementedError("buffer items cannot be deleted")

    def __bool__(self) -> bool:
        return self.nbytes > 0

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def _index(key: Any, length: int) -> int:
    """An item's index as mpi4py takes it: an int in range, negative counting from the end."""
    index = operator.index(key)  # TypeError for None, floats, ...
    if not -length <= index < length:
        raise IndexError("index out of range")
    return index


def _plain(key: slice, length: int) -> slice:
    """A slice without a step (mpi4py refuses stepped slices with IndexError)."""
    start, stop, step = key.indices(length)
    if step != 1:
        raise IndexError("slice with step not supported")
    return slice(start, max(start, stop))


memory = buffer


def Alloc_mem(size: int, info: object = None) -> buffer:
    """
    Allocate `size` bytes of memory for buffers and return it as an ``MPI.buffer``, as in mpi4py.

    `info` hints are accepted and ignored."""
    if size < 0:
        raise err.Exception(err.ERR_ARG, f"Alloc_mem: negative size {size}")
    return buffer.allocate(size)


def Free_mem(mem: buffer) -> None:
    """
    Free memory from Alloc_mem: it is garbage-collected, so this only checks that it came from there."""
    if not isinstance(mem, buffer):
        raise err.Exception(err.ERR_ARG, "Free_mem: not memory from Alloc_mem")
    mem.release()


# Attached send buffers. fmpi's buffered sends need none (a send never waits for its receiver
# to post a receive unless it is synchronous), so a buffer is only held for Detach_buffer to give back.
BSEND_OVERHEAD = 96  # MPICH's value, which programs add to the size they attach
_attached: list[object] = []


class BufferAutomaticType(AddressConstant):
    """The type of BUFFER_AUTOMATIC (MPI 4.1: the library buffers sends itself), as mpi4py names it."""

    _value = -2  # MPICH's (void *) -2
    _instance = None


BUFFER_AUTOMATIC = BufferAutomaticType("BUFFER_AUTOMATIC")


def Attach_buffer(buf: object) -> None:
    """
    Attach a buffer for buffered sends: any writable buffer a message may be (read-only is a BufferError).

    DLPack and array-interface objects are accepted too; fmpi's buffered sends need none, so it is only held for
    Detach_buffer to give back."""
    if buf is not BUFFER_AUTOMATIC:
        from .buffers import byte_view

        byte_view(buf, True)
    _attached[:] = [buf]


def Detach_buffer() -> object:
    """
    Detach and return the buffer attached last (it was never used); an empty one if none is."""
    return _attached.pop() if _attached else buffer()


def Flush_buffer() -> None:
    """
    Flush the attached buffer: nothing is ever pending in it, so this returns at once."""


def Iflush_buffer() -> Request:
    """
    Start a Flush_buffer and return its Request, complete at once as nothing is ever pending."""
    return Request.completed()

