"""The descriptive side of ``MPI.Win`` (mixed into it): group, attributes and keyvals, info, name, error handler,
its integer handle (handles.py) and pickling.

They need ``Win``'s ``_live()`` (the window's state, or ERR_WIN for a null or freed window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import exceptions as err
from . import keyvals
from .errhandler import ERRORS_RETURN, Errhandler
from .group import Group
from .handles import Handled
from .info import Info
from .packing import get_address
from .rma_constants import WIN_BASE, WIN_CREATE_FLAVOR, WIN_DISP_UNIT, WIN_MODEL, WIN_SEPARATE, WIN_SIZE, WIN_UNIFIED


class WinAttributes(Handled):
    def _referent(self) -> Any:
        return self._w

    @classmethod
    def _from_referent(cls, window: Any) -> Any:
        return cls._of(window)

    def __reduce__(self) -> str | tuple:
        """WIN_NULL travels by name (another null handle, as another of its class); a window is this
        job's, so it cannot be pickled, as in mpi4py."""
        from .win import WIN_NULL

        if self._w is not None:
            raise ValueError(f"cannot pickle {self!r}: a window is this job's")
        return "WIN_NULL" if self is WIN_NULL else (type(self), ())

    def Get_group(self) -> Group:
        return self._live().sync.Get_group()

    group = property(Get_group)

    @property
    def group_size(self) -> int:
        return self._live().sync.Get_size()

    @property
    def group_rank(self) -> int:
        return self._live().sync.Get_rank()

    def Get_attr(self, keyval: int) -> Any:
        w = self._live()
        if keyval == WIN_BASE:
            return get_address(w.view) if w.size else 0
        fixed = {WIN_SIZE: w.size, WIN_DISP_UNIT: w.disp_unit, WIN_CREATE_FLAVOR: w.flavor, WIN_MODEL: self.model}
        return fixed[keyval] if keyval in fixed else keyvals.get("win", w.attrs, keyval)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        keyvals.set_attr("win", self, self._live().attrs, keyval, attrval)

    def Delete_attr(self, keyval: int) -> None:
        keyvals.delete("win", self, self._live().attrs, keyval)

    @classmethod
    def Create_keyval(cls, copy_fn: Any = None, delete_fn: Any = None, nopython: bool = False) -> int:
        """A keyval for window attributes (windows are never duplicated: `copy_fn` is kept, never called)."""
        return keyvals.create("win", copy_fn, delete_fn)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        return keyvals.free("win", keyval)

    @property
    def attrs(self) -> tuple[int, int, int]:
        return self.Get_attr(WIN_BASE), self.Get_attr(WIN_SIZE), self.Get_attr(WIN_DISP_UNIT)

    @property
    def flavor(self) -> int:
        return self._live().flavor

    @property
    def model(self) -> int:
        """WIN_SEPARATE for a window whose public copy lives on the relay (``win_relay``), else WIN_UNIFIED."""
        return WIN_UNIFIED if self._live().relay is None else WIN_SEPARATE

    def Get_info(self) -> Info:
        return self._live().info.Dup()

    def Set_info(self, info: Info) -> None:
        self._live().info = info.Dup() if info else Info.Create()

    info = property(Get_info, Set_info)

    def Get_name(self) -> str:
        return "MPI_WIN_NULL" if self._w is None else self._w.name

    def Set_name(self, name: str) -> None:
        self._live().name = str(name)

    name = property(Get_name, Set_name)

    def Get_errhandler(self) -> Errhandler:
        return Errhandler(self._live().errhandler)  # a new handle, as in mpi4py

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """(Errors of window operations are raised as MPI.Exception whatever the handler, as under
        ERRORS_RETURN: only ``Call_errhandler`` calls it.)"""
        w = self._live()
        if not isinstance(errhandler, Errhandler) or not errhandler:
            raise err.Exception(err.ERR_ERRHANDLER, f"invalid error handler {errhandler!r}")
        installed = errhandler._installed("Win")
        if installed is None:
            raise err.Exception(err.ERR_ARG, "a communicator's error handler cannot be set on a window")
        w.errhandler = installed

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the window's handler on `errorcode`: ERRORS_RETURN does nothing, the fatal ones end the job,
        a user's is called (with SUCCESS too, as under MPICH) and the call returns."""
        handler = self._live().errhandler
        if handler._user is not None:
            handler._user.fn(self, errorcode)
        elif errorcode != err.SUCCESS and handler is not ERRORS_RETURN:
            from . import runtime

            runtime.abort(errorcode, f"Win.Call_errhandler({errorcode})")

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Callable[[Any, int], None]) -> Errhandler:
        """A user-defined error handler for windows: ``errhandler_fn(win, errorcode)``."""
        return Errhandler._create(errhandler_fn, "Win")
