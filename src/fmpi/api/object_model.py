"""mpi4py's ``MPI._sizeof``, ``MPI._addressof`` and ``MPI._handleof``: what code handing MPI objects to C asks of them.

fmpi's objects are Python objects with no C handle behind them, so these give
what a program can rely on: ``_sizeof`` the sizes of MPICH's handles (the
library fmpi stands in for; ``MPI_Status`` is five C ints, ``MPI_File`` a
pointer, the rest C ints), ``_addressof`` a nonzero number particular to the
object, ``_handleof`` the object's integer handle (``obj.handle``; for a
Status, its address, as in mpi4py).
"""

from __future__ import annotations

from typing import Any

from .absent import File, Session
from .comm import Comm
from .datatypes import Datatype
from .errhandler import Errhandler
from .group import Group
from .info import Info
from .message import Message
from .op import Op
from .request import Request
from .status import Status
from .win import Win

_SIZES: tuple[tuple[type, int], ...] = (
    (Status, 20), (Datatype, 4), (Request, 4), (Message, 4), (Op, 4), (Group, 4), (Info, 4), (Errhandler, 4),
    (Session, 4), (Comm, 4), (Win, 4), (File, 8),
)


def _sizeof(arg: Any) -> int:
    """The size in bytes of the MPI handle of `arg`, an MPI class or an object of one."""
    for kind, size in _SIZES:
        if isinstance(arg, kind) or (isinstance(arg, type) and issubclass(arg, kind)):
            return size
    raise TypeError("expecting an MPI type or instance")


def _instance(arg: Any) -> None:
    if not isinstance(arg, tuple(kind for kind, _ in _SIZES)):
        raise TypeError("expecting an MPI instance")


def _addressof(arg: Any) -> int:
    """Where the object is (its ``id``): nonzero, and its own while it lives."""
    _instance(arg)
    return id(arg)


def _handleof(arg: Any) -> int:
    """The object's integer handle; a Status has none, and gives its address, as in mpi4py."""
    _instance(arg)
    return id(arg) if isinstance(arg, Status) else arg.handle
