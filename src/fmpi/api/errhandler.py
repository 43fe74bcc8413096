"""``MPI.Errhandler``: the predefined error handlers and the user's (``Comm.Create_errhandler``,
``Win.Create_errhandler``), which a communicator or window can have (``comm._fail`` honours them).

Handles behave as mpi4py's: ``Get_errhandler`` gives a new handle each time, equal to the
handler it names; freeing a handle makes it ERRHANDLER_NULL (the predefined objects
themselves stay), and the predefined ones pickle to themselves, a user's handler not at all.

A user's handler is called as ``fn(obj, errorcode)``, `obj` the communicator or window. mpi4py
registers each in one of 32 C callback slots per kind of object and raises RuntimeError when
none is free; fmpi keeps that limit (programs and mpi4py's tests meet it) but gives a slot back
once no handle or object refers to the handler any more, where mpi4py never does, so fmpi never
refuses a handler mpi4py would create.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from .handles import Handled

MAX_USER_ERRHANDLERS = 32


class UserHandler:
    """What every handle on one user-defined handler shares: its function and the kind of object it
    serves ("Comm" or "Win"); its integer handle (handles.py) is this object's."""

    __slots__ = ("fn", "kind", "__weakref__")

    def __init__(self, fn: Callable[[Any, int], None], kind: str) -> None:
        self.fn, self.kind = fn, kind


# The live user handlers of each kind: their number is the slots in use.
_live: dict[str, weakref.WeakSet[UserHandler]] = {}


class Errhandler(Handled):
    """Error handler: what happens when an MPI call on an object fails."""
    __slots__ = ("name", "_user", "__weakref__")

    def __init__(self, errhandler: Errhandler | None = None) -> None:
        """``Errhandler()``: a null handle; ``Errhandler(eh)``: another handle on `eh`'s handler."""
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"expecting an MPI.Errhandler, not {type(errhandler).__name__}")
        self.name = errhandler.name if errhandler is not None else "ERRHANDLER_NULL"
        self._user: UserHandler | None = errhandler._user if errhandler is not None else None

    @classmethod
    def _named(cls, name: str) -> Errhandler:
        """A predefined handler (the module's constants)."""
        errhandler = cls()
        errhandler.name = name
        return errhandler

    @classmethod
    def _create(cls, fn: Callable[[Any, int], None], kind: str) -> Errhandler:
        """``Comm.Create_errhandler`` and ``Win.Create_errhandler``: a new handler for objects of `kind`."""
        if not callable(fn):
            raise TypeError(f"{type(fn).__name__!r} object is not callable")
        live = _live.setdefault(kind, weakref.WeakSet())
        if len(live) >= MAX_USER_ERRHANDLERS:
            raise RuntimeError("cannot create too many user-defined error handlers")
        errhandler = cls._named("USER")
        errhandler._user = UserHandler(fn, kind)
        live.add(errhandler._user)
        return errhandler

    def _referent(self) -> Any:
        return self._user if self._user is not None else PREDEFINED[self.name]

    @classmethod
    def _from_referent(cls, referent: Any) -> Errhandler:
        if isinstance(referent, UserHandler):
            made = cls._named("USER")
            made._user = referent
            return made
        return cls(referent)

    def _installed(self, kind: str | None) -> Errhandler | None:
        """
        Return what an object keeps when this handle is set on it.

        The predefined handler itself (which callers compare by identity), a private handle on a user's (the user
        may free theirs), or None for a user's handler of another kind than `kind` (ERR_ARG; kind None takes any, as
        MPICH's communicators do)."""
        if self._user is None:
            return PREDEFINED[self.name]
        return Errhandler(self) if kind in (None, self._user.kind) else None

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Errhandler {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Errhandler) and other.name == self.name and other._user is self._user

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def __bool__(self) -> bool:
        return self.name != "ERRHANDLER_NULL"

    def __reduce__(self) -> Any:
        if self._user is not None:
            raise ValueError(f"cannot serialize 'fmpi.MPI.{type(self).__name__}' instance")
        predefined = PREDEFINED.get(self.name)
        return self.name if self is predefined else (type(self), (predefined,))

    def Free(self) -> None:
        """
        Free a user error handler: the handle becomes ERRHANDLER_NULL (a predefined one stays itself)."""
        from . import exceptions as err

        if not self:
            raise err.Exception(err.ERR_ERRHANDLER, "Free on a null error handler (ERRHANDLER_NULL)")
        if self is not PREDEFINED.get(self.name):
            self.name, self._user = "ERRHANDLER_NULL", None

    def free(self) -> None:
        """
        Free unless null or predefined (mpi4py's lowercase form)."""
        if self and self is not PREDEFINED.get(self.name):
            self.Free()


ERRORS_ARE_FATAL = Errhandler._named("ERRORS_ARE_FATAL")
ERRORS_RETURN = Errhandler._named("ERRORS_RETURN")
ERRORS_ABORT = Errhandler._named("ERRORS_ABORT")
ERRHANDLER_NULL = Errhandler._named("ERRHANDLER_NULL")
PREDEFINED = {eh.name: eh for eh in (ERRORS_ARE_FATAL, ERRORS_RETURN, ERRORS_ABORT, ERRHANDLER_NULL)}
