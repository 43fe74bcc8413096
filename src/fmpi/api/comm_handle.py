"""What mpi4py asks of every communicator besides communicating (mixed into ``Comm``): info
hints, the topology kind, pickling, freeing (the handle becomes COMM_NULL), calling its error
handler, and the MPI 4.1 per-communicator send buffers.

Pickling follows mpi4py: COMM_WORLD, COMM_SELF and COMM_NULL travel by name and unpickle to
themselves (another handle on them, to another handle); any other communicator
cannot be pickled (ValueError), its context being meaningless elsewhere.
"""

from __future__ import annotations

from typing import Any, NoReturn

from . import exceptions as err
from .constants import UNDEFINED
from .errhandler import ERRORS_RETURN, Errhandler
from .info import Info


def predefined(name: str) -> Any:
    """COMM_WORLD, COMM_SELF or COMM_NULL of this process (what a pickled one unpickles to)."""
    from . import runtime
    from .comm import COMM_NULL

    return {"COMM_WORLD": runtime.state.world, "COMM_SELF": runtime.state.self_comm, "COMM_NULL": COMM_NULL}[name]


class CommHandle:
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
        self._stop_worker()
        self._engine, self._group, self._index, self._rank = None, (), {}, -1

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the communicator's handler on `errorcode`: ERRORS_RETURN does nothing, the fatal ones end the job."""
        self._live()
        if errorcode != err.SUCCESS and self._errhandler is not ERRORS_RETURN:
            self._fail(errorcode, f"Call_errhandler({errorcode})")

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        raise NotImplementedError("user-defined error handlers are not supported by fmpi")

    def Free(self) -> None:
        self._free_handle()

    free = Free

    def Set_info(self, info: Info) -> None:
        """Hints are accepted and ignored (fmpi takes none), as MPI allows; Get_info gives them back."""
        self.__dict__["_info"] = dict(info.items()) if info else {}

    def Get_info(self) -> Info:
        return Info.Create(self.__dict__.get("_info", {}))

    info = property(Get_info, Set_info)

    def toint(self) -> int:
        """-1: fmpi's communicators have no C or Fortran handle (mpi4py's tests then skip fromint/f2py)."""
        return -1

    py2f = toint

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
