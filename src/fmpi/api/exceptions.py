"""``MPI.Exception`` and the error classes, numbered as in MPICH."""

from __future__ import annotations

import builtins
from typing import Any

SUCCESS = 0
ERR_BUFFER = 1
ERR_COUNT = 2
ERR_TYPE = 3
ERR_TAG = 4
ERR_COMM = 5
ERR_RANK = 6
ERR_ROOT = 7
ERR_GROUP = 8
ERR_OP = 9
ERR_ARG = 12
ERR_UNKNOWN = 13
ERR_TRUNCATE = 14
ERR_OTHER = 15
ERR_INTERN = 16
ERR_PENDING = 18
ERR_REQUEST = 19
ERR_INFO = 28
ERR_INFO_KEY = 29
ERR_INFO_VALUE = 30
ERR_INFO_NOKEY = 31
ERR_NO_MEM = 34
ERR_UNSUPPORTED_OPERATION = 44
ERR_PROC_ABORTED = 76
ERR_LASTCODE = 0x3FFFFFFF

# fmpi-specific classes, above MPICH's own.
ERR_TIMEOUT = 1000
ERR_PEER_DIED = ERR_PROC_ABORTED

_NAMES = {v: k for k, v in dict(globals()).items() if k.startswith(("ERR_", "SUCCESS")) and isinstance(v, int)}
_NAMES[ERR_PROC_ABORTED] = "ERR_PROC_ABORTED"


class Exception(RuntimeError):  # noqa: A001 - the name mpi4py users catch
    """An MPI error. ``Get_error_class()`` tells which kind."""

    # What, elsewhere in the job, this error is a consequence of (a transport
    # error's ``cause``): an uncaught one's abort says so (see ``cause_of``).
    _cause: dict | None = None

    def __init__(self, ierr: int = ERR_OTHER, message: str | None = None) -> None:
        self.ierr = ierr
        self.message = message or Get_error_string(ierr)
        super().__init__(self.message)

    @property
    def error_class(self) -> int:
        return self.ierr

    @property
    def error_code(self) -> int:
        return self.ierr

    def Get_error_class(self) -> int:
        return self.ierr

    def Get_error_code(self) -> int:
        return self.ierr

    def Get_error_string(self) -> str:
        return self.message

    def __int__(self) -> int:
        return self.ierr

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.ierr == other
        return NotImplemented

    __hash__ = RuntimeError.__hash__


class UnusableBuffer(Exception, builtins.BufferError):
    """A buffer the call cannot use as it is (read-only where it must be written, not contiguous).

    mpi4py raises ``BufferError`` for these, before any MPI call; this is that
    and an ``MPI.Exception`` of class ERR_BUFFER, so code catching either works.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ERR_BUFFER, message)


def Get_error_class(errorcode: int) -> int:
    return errorcode


def Get_error_string(errorcode: int) -> str:
    name = _NAMES.get(errorcode, "ERR_UNKNOWN")
    return f"MPI_{name}"


__all__ = [n for n in _NAMES.values()] + ["Exception", "Get_error_class", "Get_error_string"]  # what MPI.py re-exports


def from_transport(exc: Any) -> Exception:
    """The MPI.Exception for a transport error (``TransportError``), keeping its cause."""
    mpi_exc = Exception(from_class_name(exc.error_class), str(exc))
    mpi_exc._cause = exc.cause
    return mpi_exc


def cause_of(exc: BaseException | None) -> dict | None:
    """The cause an exception carries, or one it was raised from or while handling (a program may wrap ours)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        cause = getattr(exc, "_cause", None)
        if isinstance(cause, dict):
            return cause
        exc = exc.__cause__ or exc.__context__
    return None


def from_class_name(name: str) -> int:
    """Map a transport error class name ('ERR_TRUNCATE') to its number."""
    return {
        "ERR_TRUNCATE": ERR_TRUNCATE,
        "ERR_RANK": ERR_RANK,
        "ERR_TIMEOUT": ERR_TIMEOUT,
        "ERR_PEER_DIED": ERR_PROC_ABORTED,
        "ERR_PEER_FINALIZED": ERR_PROC_ABORTED,
        "ERR_UNREACHABLE": ERR_PROC_ABORTED,
        "ERR_ABORTED": ERR_PROC_ABORTED,
    }.get(name, ERR_OTHER)
