"""``MPI.buffer`` (alias ``MPI.memory``) for memory that fmpi hands out: ``buffer.allocate``, ``Alloc_mem``.

mpi4py's ``buffer`` also wraps foreign memory (``frombuffer``, ``fromaddress``);
a pure-Python class can expose the buffer protocol only by being one of the
builtin buffers, so here it is a ``bytearray`` that fmpi allocates, which is
what ``mpi4py.util.pkl5`` and ``Alloc_mem`` users need.
"""

from __future__ import annotations

from . import exceptions as err
from .constants import Sentinel
from .request import Request


class buffer(bytearray):
    @staticmethod
    def allocate(nbytes: int, clear: bool = False) -> buffer:
        """`nbytes` bytes (always zeroed: a bytearray cannot be left uninitialized)."""
        if nbytes < 0:
            raise ValueError(f"negative buffer size {nbytes}")
        return buffer(nbytes)

    @property
    def nbytes(self) -> int:
        return len(self)

    @property
    def readonly(self) -> bool:
        return False

    @property
    def obj(self) -> None:
        return None

    @property
    def format(self) -> str:
        return "B"

    @property
    def address(self) -> int:
        from .packing import get_address

        return get_address(self)

    def __setitem__(self, key: int | slice, value: object) -> None:
        """As mpi4py's buffer: ``m[a:b] = v`` with an int `v` fills the slice with that byte."""
        if isinstance(key, slice) and isinstance(value, int):
            value = bytes([value]) * len(range(*key.indices(len(self))))
        super().__setitem__(key, value)

    def release(self) -> None:
        """Nothing to release: the memory is garbage-collected."""


memory = buffer


def Alloc_mem(size: int, info: object = None) -> buffer:
    """`size` bytes of memory for buffers (an ``MPI.buffer``, as in mpi4py); `info` hints are ignored."""
    if size < 0:
        raise err.Exception(err.ERR_ARG, f"Alloc_mem: negative size {size}")
    return buffer(size)


def Free_mem(mem: buffer) -> None:
    """Memory from Alloc_mem is garbage-collected; this only checks that it came from there."""
    if not isinstance(mem, buffer):
        raise err.Exception(err.ERR_ARG, "Free_mem: not memory from Alloc_mem")


# Attached send buffers. fmpi's buffered sends need none (a send never waits for its receiver
# to post a receive unless it is synchronous), so a buffer is only held for Detach_buffer to give back.
BSEND_OVERHEAD = 96  # MPICH's value, which programs add to the size they attach
_attached: list[object] = []


class BufferAutomaticType(Sentinel):
    """The type of BUFFER_AUTOMATIC (MPI 4.1: the library buffers sends itself), as mpi4py names it."""


BUFFER_AUTOMATIC = BufferAutomaticType("BUFFER_AUTOMATIC")


def Attach_buffer(buf: object) -> None:
    """Any writable buffer a message may be (DLPack and array-interface objects too); read-only is a BufferError."""
    if buf is not BUFFER_AUTOMATIC:
        from .buffers import byte_view

        byte_view(buf, True)
    _attached[:] = [buf]


def Detach_buffer() -> object:
    """The buffer attached last (it was never used: see above); an empty one if none is."""
    return _attached.pop() if _attached else buffer(0)


def Flush_buffer() -> None:
    """Nothing is ever pending in an attached buffer."""


def Iflush_buffer() -> Request:
    """Flush_buffer's non-blocking form: complete at once, nothing being pending."""
    return Request.completed()

