"""The errors of a bad message spec: mpi4py's builtin classes that are also ``MPI.Exception``\\s.

mpi4py refuses a bad count, displacement or item count with ValueError and an object that is no buffer
with TypeError, before any MPI call; fmpi's callers (and its own tests) catch ``MPI.Exception`` with an
error class. Each error here is both, as ``exceptions.UnusableBuffer`` is for BufferError.
"""

from __future__ import annotations

from . import exceptions as err


class BadSpec(err.Exception, ValueError):
    """A count, displacement, datatype or item count mpi4py refuses with ValueError."""

    def __init__(self, ierr: int, message: str) -> None:
        super().__init__(ierr, message)


class NotABuffer(err.Exception, TypeError):
    """An object that exports no memory (mpi4py: TypeError), of class ERR_BUFFER."""

    def __init__(self, message: str) -> None:
        super().__init__(err.ERR_BUFFER, message)
