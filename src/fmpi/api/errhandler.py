"""``MPI.Errhandler`` and the predefined error handlers a communicator can have (``comm._fail`` honours them).

Handles behave as mpi4py's: ``Get_errhandler`` gives a new handle each time, equal to the
predefined one it names; freeing a handle makes it ERRHANDLER_NULL (the predefined objects
themselves stay), and the predefined ones pickle to themselves. User-defined handlers
(``Create_errhandler``) are not supported: NotImplementedError, which mpi4py's tests read as absent.
"""

from __future__ import annotations

from typing import Any

from .handles import Handled


class Errhandler(Handled):
    __slots__ = ("name", "__weakref__")

    def __init__(self, errhandler: Errhandler | None = None) -> None:
        """``Errhandler()``: a null handle; ``Errhandler(eh)``: another handle on `eh`'s handler."""
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"expecting an MPI.Errhandler, not {type(errhandler).__name__}")
        self.name = errhandler.name if errhandler is not None else "ERRHANDLER_NULL"

    @classmethod
    def _named(cls, name: str) -> Errhandler:
        """A predefined handler (the module's constants)."""
        errhandler = cls()
        errhandler.name = name
        return errhandler

    def _referent(self) -> Errhandler:
        return PREDEFINED[self.name]

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Errhandler {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Errhandler) and other.name == self.name

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def __bool__(self) -> bool:
        return self.name != "ERRHANDLER_NULL"

    def __reduce__(self) -> Any:
        predefined = PREDEFINED.get(self.name)
        return self.name if self is predefined else (type(self), (predefined,))

    def Free(self) -> None:
        from . import exceptions as err

        if not self:
            raise err.Exception(err.ERR_ERRHANDLER, "Free on a null error handler (ERRHANDLER_NULL)")
        if self is not PREDEFINED[self.name]:
            self.name = "ERRHANDLER_NULL"

    def free(self) -> None:
        """Free unless null or predefined (mpi4py's lowercase form)."""
        if self and self is not PREDEFINED[self.name]:
            self.Free()


ERRORS_ARE_FATAL = Errhandler._named("ERRORS_ARE_FATAL")
ERRORS_RETURN = Errhandler._named("ERRORS_RETURN")
ERRORS_ABORT = Errhandler._named("ERRORS_ABORT")
ERRHANDLER_NULL = Errhandler._named("ERRHANDLER_NULL")
PREDEFINED = {eh.name: eh for eh in (ERRORS_ARE_FATAL, ERRORS_RETURN, ERRORS_ABORT, ERRHANDLER_NULL)}
