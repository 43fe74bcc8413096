"""The windows ``Win.Allocate`` makes: a ``Win`` that is also the bytearray holding its window memory.

mpi4py's ``Win`` exports its memory through the buffer protocol, and mpi4py.util.sync's Mutex, Condition and
Semaphore read their counters so (``memoryview(window)``). A class written in Python exports a buffer only
from Python 3.12 on (PEP 688: ``Win.__buffer__``) or by being a builtin buffer type; so that util.sync runs on
3.11 too, the window Allocate makes is its own memory. ``Create``'s windows (the caller's memory) and
``Allocate_shared``'s (a shared mapping) cannot be, and export a buffer from 3.12 on only.
"""

from __future__ import annotations

from typing import Any

from .memory import buffer
from .rma_constants import WIN_FLAVOR_ALLOCATE
from .win import Win, _Window


class AllocatedWin(Win, bytearray):
    """A Win whose own bytes are the window's memory (see the module docstring); Win's methods come first."""

    def __init__(self, size: int) -> None:
        bytearray.__init__(self, size)
        Win.__init__(self)


def allocate(cls: type[Win], comm: Any, size: int, disp_unit: int, info: Any = None) -> Win:
    """A window of `size` bytes of new memory; a program's subclass of Win keeps its class, and an MPI.buffer."""
    if cls is not Win:
        memory = buffer.allocate(size)
        return cls._of(_Window(comm, memory, size, disp_unit, WIN_FLAVOR_ALLOCATE, info))
    win = AllocatedWin(size)
    win._w = _Window(comm, win, size, disp_unit, WIN_FLAVOR_ALLOCATE, info)
    return win
