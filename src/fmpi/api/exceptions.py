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
ERR_TOPOLOGY = 10
ERR_DIMS = 11
ERR_ARG = 12
ERR_UNKNOWN = 13
ERR_TRUNCATE = 14
ERR_OTHER = 15
ERR_INTERN = 16
ERR_IN_STATUS = 17
ERR_PENDING = 18
ERR_REQUEST = 19
ERR_ACCESS = 20
ERR_AMODE = 21
ERR_BAD_FILE = 22
ERR_CONVERSION = 23
ERR_DUP_DATAREP = 24
ERR_FILE_EXISTS = 25
ERR_FILE_IN_USE = 26
ERR_FILE = 27
ERR_INFO = 28
ERR_INFO_KEY = 29
ERR_INFO_VALUE = 30
ERR_INFO_NOKEY = 31
ERR_IO = 32
ERR_NAME = 33
ERR_NO_MEM = 34
ERR_NOT_SAME = 35
ERR_NO_SPACE = 36
ERR_NO_SUCH_FILE = 37
ERR_PORT = 38
ERR_QUOTA = 39
ERR_READ_ONLY = 40
ERR_SERVICE = 41
ERR_SPAWN = 42
ERR_UNSUPPORTED_DATAREP = 43
ERR_UNSUPPORTED_OPERATION = 44
ERR_WIN = 45
ERR_BASE = 46
ERR_LOCKTYPE = 47
ERR_KEYVAL = 48
ERR_RMA_CONFLICT = 49
ERR_RMA_SYNC = 50
ERR_SIZE = 51
ERR_DISP = 52
ERR_ASSERT = 53
ERR_RMA_RANGE = 55
ERR_RMA_ATTACH = 56
ERR_RMA_SHARED = 57
ERR_RMA_FLAVOR = 58
ERR_SESSION = 75
ERR_PROC_ABORTED = 76
ERR_VALUE_TOO_LARGE = 77
ERR_ERRHANDLER = 80
ERR_LASTCODE = 0x3FFFFFFF

# fmpi-specific classes, above MPICH's own.
ERR_TIMEOUT = 1000
ERR_PEER_DIED = ERR_PROC_ABORTED

_NAMES = {v: k for k, v in dict(globals()).items() if k.startswith(("ERR_", "SUCCESS")) and isinstance(v, int)}
_NAMES[ERR_PROC_ABORTED] = "ERR_PROC_ABORTED"

# Classes that share another's number, as under MPICH built without fault tolerance (ULFM) and
# without the MPI ABI: they are names only (Get_error_string says the class they share).
ERR_PROC_FAILED = ERR_PROC_FAILED_PENDING = ERR_REVOKED = ERR_UNKNOWN
ERR_ABI = ERR_LASTCODE
_ALIASES = ["ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED", "ERR_ABI"]


class Exception(RuntimeError):  # noqa: A001 - the name mpi4py users catch
    """An MPI error. ``Get_error_class()`` tells which kind."""

    # What, elsewhere in the job, this error is a consequence of (a transport
    # error's ``cause``): an uncaught one's abort says so (see ``cause_of``).
    _cause: dict | None = None

    def __init__(self, ierr: int = ERR_OTHER, message: str | None = None) -> None:
        self.ierr = ERR_UNKNOWN if ierr < SUCCESS else ierr  # (a negative code is ERR_UNKNOWN, as in mpi4py)
        self.message = message or Get_error_string(self.ierr)
        super().__init__(self.message)

    @property
    def error_class(self) -> int:
        return Get_error_class(self.ierr)

    @property
    def error_code(self) -> int:
        return self.ierr

    @property
    def error_string(self) -> str:
        return self.message

    def Get_error_class(self) -> int:
        """
        Return the error class of this exception's error code."""
        return Get_error_class(self.ierr)

    def Get_error_code(self) -> int:
        """
        Return this exception's error code."""
        return self.ierr

    def Get_error_string(self) -> str:
        """
        Return this exception's error message."""
        return self.message

    def __int__(self) -> int:
        return self.ierr

    def __bool__(self) -> bool:
        return self.ierr != SUCCESS

    def __repr__(self) -> str:
        return f"MPI.Exception({self.ierr})"

    def __str__(self) -> str:
        return self.message

    # Compared as its error code, with ints or other MPI.Exceptions (mpi4py's rich comparisons).
    def __eq__(self, other: object) -> bool:
        return _code(self) == _code(other) if _code(other) is not None else NotImplemented

    def __ne__(self, other: object) -> bool:
        return _code(self) != _code(other) if _code(other) is not None else NotImplemented

    def __lt__(self, other: object) -> bool:
        return _code(self) < _code(other) if _code(other) is not None else NotImplemented

    def __le__(self, other: object) -> bool:
        return _code(self) <= _code(other) if _code(other) is not None else NotImplemented

    def __gt__(self, other: object) -> bool:
        return _code(self) > _code(other) if _code(other) is not None else NotImplemented

    def __ge__(self, other: object) -> bool:
        return _code(self) >= _code(other) if _code(other) is not None else NotImplemented

    def __hash__(self) -> int:
        return hash(self.ierr)


def _code(value: object) -> int | None:
    if isinstance(value, Exception):
        return value.ierr
    return value if isinstance(value, int) else None


class UnusableBuffer(Exception, builtins.BufferError):
    """A buffer the call cannot use as it is (read-only where it must be written, not contiguous).

    mpi4py raises ``BufferError`` for these, before any MPI call; this is that
    and an ``MPI.Exception`` of class ERR_BUFFER, so code catching either works.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ERR_BUFFER, message)


def Get_error_class(errorcode: int) -> int:
    """
    Return the error class of `errorcode`."""
    return _user_codes.get(errorcode, errorcode)


def Get_error_string(errorcode: int) -> str:
    """
    Return the message of `errorcode`: a user code's own string, else the MPI name of the error."""
    if errorcode in _user_codes or errorcode in _user_classes:
        return _user_strings.get(errorcode, "")
    name = _NAMES.get(errorcode, "ERR_UNKNOWN")
    return f"MPI_{name}"


# User error classes and codes (MPI_Add_error_class/code/string), numbered as MPICH numbers them:
# above ERR_LASTCODE (bit 30), a class 0x80 + its index in the low byte, a code its index in the
# bits above and its class's low byte below. The LASTUSEDCODE attribute is the last class added.
_DYNAMIC = 0x40000000
_user_classes: list[int] = []
_user_codes: dict[int, int] = {}  # code -> its class
_user_strings: dict[int, str] = {}


def Add_error_class() -> int:
    """
    Add a user error class and return it (numbered as MPICH numbers them)."""
    errorclass = _DYNAMIC | (0x80 + len(_user_classes) + 1)
    _user_classes.append(errorclass)
    return errorclass


def Add_error_code(errorclass: int) -> int:
    """
    Add a user error code of class `errorclass` and return it."""
    if errorclass not in _user_classes and errorclass not in _NAMES:
        raise Exception(ERR_ARG, f"Add_error_code: {errorclass} is not an error class")
    errorcode = _DYNAMIC | ((len(_user_codes) + 1) << 8) | (errorclass & 0xFF)
    _user_codes[errorcode] = errorclass
    return errorcode


def Add_error_string(errorcode: int, string: str) -> None:
    """
    Set the message of user error class or code `errorcode`."""
    if errorcode not in _user_codes and errorcode not in _user_classes:
        raise Exception(ERR_ARG, f"Add_error_string: {errorcode} is not a user error class or code")
    _user_strings[errorcode] = str(string)


def last_used_code() -> int:
    """The LASTUSEDCODE attribute's value."""
    return _user_classes[-1] if _user_classes else ERR_LASTCODE


def _remove(errorcode: int) -> None:
    """
    Raise NotImplementedError: MPI_Remove_error_class/code/string are MPI 4.1's, and fmpi reports MPI 3.1.

    This is what mpi4py does over such a library."""
    raise NotImplementedError("MPI_Remove_error_class/code/string (MPI 4.1)")


Remove_error_class = Remove_error_code = Remove_error_string = _remove

__all__ = [n for n in _NAMES.values()] + _ALIASES + [  # what MPI.py re-exports
    "Exception", "Get_error_class", "Get_error_string", "Add_error_class", "Add_error_code", "Add_error_string",
    "Remove_error_class", "Remove_error_code", "Remove_error_string",
]


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
