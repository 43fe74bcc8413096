"""The MPI features fmpi does not provide (yet), present as names whose use raises NotImplementedError.

That is what mpi4py does over an MPI library that lacks a feature, and what
programs, libraries and mpi4py's own test suite check for ("feature absent":
they skip it) — where a missing name would stop them at import with an
AttributeError. Covered: MPI-IO (``File``),
sessions, partitioned point-to-point. Importing this module attaches the methods.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .handles import Handled
from .intracomm import Intracomm


def _absent(feature: str) -> NoReturn:
    raise NotImplementedError(f"{feature} is not supported by fmpi")


class _Absent(Handled):
    """A null handle of a feature fmpi lacks (FILE_NULL, SESSION_NULL): false, equal to its kind's nulls."""

    def __init__(self, other: _Absent | None = None) -> None:
        """``File()``, ``File(FILE_NULL)``: another null handle; anything else is a TypeError, as in mpi4py."""
        if other is not None and not isinstance(other, self._kind()):
            raise TypeError(f"expecting an MPI.{self._kind().__name__}, not {type(other).__name__}")

    @classmethod
    def _kind(cls) -> type:
        """File or Session (a subclass of one is still one)."""
        return next(c for c in cls.__mro__ if _Absent in c.__bases__)

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, self._kind())

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def __reduce__(self) -> str | tuple:
        name = f"{self._kind().__name__.upper()}_NULL"
        return name if self is globals()[name] else (type(self), ())

    def free(self) -> None:
        """Nothing to free: there is only the null handle."""


class File(_Absent):
    """MPI-IO file handle: fmpi has no MPI-IO, so only the null handle FILE_NULL exists."""
    @classmethod
    def Open(cls, *args: Any, **kwargs: Any) -> NoReturn:
        """
        Raise NotImplementedError: fmpi has no MPI-IO."""
        _absent("MPI-IO (MPI.File)")


class Session(_Absent):
    """MPI session handle: fmpi has no sessions, so only the null handle SESSION_NULL exists."""
    @classmethod
    def Init(cls, *args: Any, **kwargs: Any) -> NoReturn:
        """
        Raise NotImplementedError: fmpi has no MPI sessions."""
        _absent("MPI sessions (MPI.Session)")


FILE_NULL, SESSION_NULL = File(), Session()

# The constants of those features, with MPICH's values, so programs that name them import.
MODE_CREATE, MODE_RDONLY, MODE_WRONLY, MODE_RDWR = 1, 2, 4, 8
MODE_DELETE_ON_CLOSE, MODE_UNIQUE_OPEN, MODE_EXCL, MODE_APPEND, MODE_SEQUENTIAL = 16, 32, 64, 128, 256
SEEK_SET, SEEK_CUR, SEEK_END = 600, 602, 604
DISPLACEMENT_CURRENT = DISP_CUR = -54278278
MAX_DATAREP_STRING = 128
MAX_PORT_NAME = 1024


def Register_datarep(*args: Any, **kwargs: Any) -> NoReturn:
    """
    Raise NotImplementedError: fmpi has no MPI-IO data representations."""
    _absent("MPI-IO data representations (Register_datarep)")


def _stub(name: str, feature: str):
    def method(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        """
        Raise NotImplementedError: fmpi has no partitioned communication."""
        _absent(f"{feature} ({name})")

    method.__name__ = name
    return method


for _name in ("Psend_init", "Precv_init"):
    setattr(Intracomm, _name, _stub(_name, "partitioned communication"))
