"""What mpi4py asks of every communicator besides communicating (mixed into ``Comm``): info
hints, the topology kind, pickling, freeing (the handle becomes COMM_NULL), calling its error
handler, the MPI 4.1 per-communicator send buffers, and the intercommunicators a process gets from
outside its world (``Get_parent``, ``Join``).

Pickling follows mpi4py: COMM_WORLD, COMM_SELF and COMM_NULL travel by name and unpickle to
themselves (another handle on them, to another handle); any other communicator
cannot be pickled (ValueError), its context being meaningless elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from . import exceptions as err
from .constants import UNDEFINED
from .errhandler import ERRORS_RETURN, Errhandler
from .handles import Handled
from .info import Info


def predefined(name: str) -> Any:
    """COMM_WORLD, COMM_SELF or COMM_NULL of this process (what a pickled one unpickles to)."""
    from . import runtime
    from .comm import COMM_NULL

    return {"COMM_WORLD": runtime.state.world, "COMM_SELF": runtime.state.self_comm, "COMM_NULL": COMM_NULL}[name]


class _Referent:
    """What every handle on one communicator shares for its integer handle (handles.py): the state the
    handles share (their ``__dict__``) and the communicator's class, which ``Comm.fromhandle`` gives back."""

    __slots__ = ("kind", "state", "__weakref__")

    def __init__(self, kind: type, state: dict) -> None:
        self.kind, self.state = kind, state


def fmpi_class(cls: type) -> type:
    """The fmpi class a communicator class is or derives from (a program's, or pkl5's, subclass: its base)."""
    return next(c for c in cls.__mro__ if c.__module__.startswith("fmpi."))


class CommHandle(Handled):
    def _referent(self) -> _Referent:
        referent = self.__dict__.get("_handle_referent")
        if referent is None:  # `_kind`: the class the communicator was made as (Comm.__init__)
            kind = self.__dict__.get("_kind") or fmpi_class(type(self))
            referent = self.__dict__["_handle_referent"] = _Referent(kind, self.__dict__)
        return referent

    @classmethod
    def _from_referent(cls, referent: _Referent) -> Any:
        comm = referent.kind.__new__(referent.kind)
        comm.__dict__ = referent.state
        return comm

    def _of_my_class(self, comm: Any) -> Any:
        """`comm`, made from this communicator by Dup, as a handle of this handle's class when that is a
        program's subclass of fmpi's: mpi4py's Dup gives ``type(self)``, and mpi4py.util.pkl5's
        communicators rely on it (a plain Dup of one sent and probed without pkl5's protocol, and hung)."""
        kind = type(self)
        if kind is type(comm) or kind.__module__.startswith("fmpi."):
            return comm
        return type(comm).__new__(kind, comm)  # fmpi's __new__: the subclass's own would Clone (test_subclass's MyComm)

    def _actual(self) -> Any:
        """This communicator through a handle of its own class (an Intracomm, ...): how a handle of a
        program's subclass of MPI.Comm itself reaches what only intra- and intercommunicators have."""
        return self._from_referent(self._referent())

    def Dup(self, info: Any = None) -> Any:
        """mpi4py has Dup on every Comm: a handle of MPI.Comm (or of a subclass of it) duplicates as its kind."""
        return self._of_my_class(self._actual().Dup(info))

    Clone = Dup

    def __reduce__(self) -> tuple:
        for name in ("COMM_WORLD", "COMM_SELF", "COMM_NULL"):
            comm = predefined(name)
            if comm is not None and self.__dict__ is comm.__dict__:
                return (predefined, (name,)) if self is comm else (type(self), (comm,))
        if self._engine is None:  # another null handle
            return (type(self), ())
        raise ValueError(f"cannot pickle {self!r}: only COMM_WORLD and COMM_SELF can be, as in mpi4py")

    def _live(self) -> None:
        """An MPI error (ERR_COMM) if this is a null handle: COMM_NULL, ``MPI.Comm()``, a freed communicator."""
        if self._engine is None:
            self._fail(err.ERR_COMM, "invalid communicator (COMM_NULL)")

    def _free_handle(self) -> None:
        """MPI_Comm_free: this handle (and every other handle on the communicator, which shares its
        state) becomes COMM_NULL; the predefined communicators and null handles cannot be freed."""
        self._live()
        for name in ("COMM_WORLD", "COMM_SELF"):
            comm = predefined(name)
            if comm is not None and self.__dict__ is comm.__dict__:
                self._fail(err.ERR_COMM, f"cannot free the predefined communicator {name}")
        self._delete_attributes()  # type: ignore[attr-defined] - the user's attributes' delete_fn (keyvals)
        self._actual()._stop_worker()
        self._engine, self._group, self._index, self._rank = None, (), {}, -1

    def Get_errhandler(self) -> Errhandler:
        self._live()
        return Errhandler(self._errhandler)  # a new handle, as in mpi4py

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        self._live()
        if not isinstance(errhandler, Errhandler) or not errhandler:
            self._fail(err.ERR_ERRHANDLER, f"invalid error handler {errhandler!r}")
        self._errhandler = errhandler._installed(None)

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the communicator's handler on `errorcode`: ERRORS_RETURN does nothing, the fatal ones end the
        job, a user's is called (with SUCCESS too, as under MPICH) and the call returns."""
        self._live()
        if self._errhandler._user is not None:
            self._errhandler._user.fn(self, errorcode)
        elif errorcode != err.SUCCESS and self._errhandler is not ERRORS_RETURN:
            self._fail(errorcode, f"Call_errhandler({errorcode})")

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Callable[[Any, int], None]) -> Errhandler:
        """A user-defined error handler for communicators: ``errhandler_fn(comm, errorcode)``."""
        return Errhandler._create(errhandler_fn, "Comm")

    def Free(self) -> None:
        self._free_handle()

    def free(self) -> None:
        """mpi4py's safe free: a null handle and COMM_WORLD, COMM_SELF are left alone; another handle on
        one of those becomes null itself (mpi4py nullifies it), the communicator staying."""
        if self._engine is None:
            return
        for name in ("COMM_WORLD", "COMM_SELF"):
            comm = predefined(name)
            if comm is not None and self.__dict__ is comm.__dict__:
                if self is not comm:
                    self.__dict__ = predefined("COMM_NULL").__dict__
                return
        self.Free()

    def Set_info(self, info: Info) -> None:
        """Hints are accepted and ignored (fmpi takes none), as MPI allows; Get_info gives them back."""
        self.__dict__["_info"] = dict(info.items()) if info else {}

    def Get_info(self) -> Info:
        return Info.Create(self.__dict__.get("_info", {}))

    info = property(Get_info, Set_info)

    def Get_topology(self) -> int:
        self._live()
        return UNDEFINED

    @property
    def is_topo(self) -> bool:
        return self.Get_topology() != UNDEFINED

    @property
    def topology(self) -> int:
        return self.Get_topology()

    def Attach_buffer(self, *args: Any) -> NoReturn:
        raise NotImplementedError("per-communicator send buffers (MPI 4.1; fmpi reports MPI 3.1): use MPI.Attach_buffer")

    Detach_buffer = Flush_buffer = Iflush_buffer = Attach_buffer

    @classmethod
    def Get_parent(cls) -> Any:
        """The intercommunicator with the processes that spawned this one; a null one (== COMM_NULL) if none did."""
        from .spawn import get_parent

        return get_parent()

    @classmethod
    def Join(cls, fd: int) -> Any:
        """The intercommunicator with the process at the other end of the connected socket `fd` (MPI_Comm_join)."""
        from .ports import join_socket

        return join_socket(fd)
