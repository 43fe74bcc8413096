"""``MPI.Grequest``: generalized requests, which the program completes itself (``Complete``).

Its op is the engine's own (``new_op``), completed by ``Complete``, so ``Wait``, ``Test``,
``Waitall``... see it as any other request, and a thread may wait on it while another completes
it. When it is waited on or tested complete, ``query_fn(status, *args, **kwargs)`` fills the status
(its source, tag and count reach the caller's; as under MPICH, not its error or cancelled flag) and ``free_fn(*args, **kwargs)`` runs; ``Cancel`` calls ``cancel_fn(completed, *args, **kwargs)``.
A callback's exception is printed (traceback on stderr) and raised as ``MPI.Exception``: its own
error class for an ``MPI.Exception``, ERR_OTHER for any other — as mpi4py does.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any

from . import exceptions as err
from . import runtime
from .request import Request
from .status import Status


class Grequest(Request):
    """Generalized request: an operation the program itself completes."""
    __slots__ = ("_query", "_free", "_cancel", "_args", "_kwargs", "_value", "_completed", "_freed_early")

    def __init__(self, request: Request | None = None) -> None:
        if request and not isinstance(request, Grequest):
            raise TypeError("expecting a generalized request")
        super().__init__(request)
        for slot in Grequest.__slots__:
            setattr(self, slot, getattr(request, slot, None) if isinstance(request, Grequest) else None)
        self._completed = bool(self._completed)

    @classmethod
    def Start(cls, query_fn: Callable | None = None, free_fn: Callable | None = None,
              cancel_fn: Callable | None = None, args: tuple | None = None, kwargs: dict | None = None) -> Grequest:
        """
        Start a generalized request with the program's query, free and cancel callbacks."""
        engine = runtime.state.engine
        greq = cls()
        greq._engine, greq._op, greq._settled = engine, engine.new_op(), False
        greq._query, greq._free, greq._cancel = query_fn, free_fn, cancel_fn
        greq._args, greq._kwargs = tuple(args or ()), dict(kwargs or {})
        greq._completed = greq._freed_early = False
        return greq

    def Complete(self) -> None:
        """
        Mark the request complete, so that waits on it return."""
        if self._op is None or self._completed:
            raise err.Exception(err.ERR_REQUEST, "Complete on a null or completed generalized request")
        self._completed = True
        self._engine.finish_op(self._op)
        if self._freed_early:  # freed before completion: its free_fn runs now
            self._call(self._free)

    def complete(self, obj: Any = None) -> None:
        """
        Complete the request with `obj` as the value ``wait`` and ``test`` return."""
        self._value = obj
        self.Complete()

    def Cancel(self) -> None:
        """
        Call the request's cancel function (with whether it has completed)."""
        if not self:
            raise err.Exception(err.ERR_REQUEST, "Cancel on a null request (REQUEST_NULL)")
        self._call(self._cancel, self._completed)

    cancel = Cancel

    def Free(self) -> None:
        """
        Free the request: the handle becomes null; free_fn runs when it completes (at once if it has)."""
        if not self:
            raise err.Exception(err.ERR_REQUEST, "Free on a null request (REQUEST_NULL)")
        completed, self._settled = self._completed, True
        if completed:
            self._call(self._free)
        else:
            self._freed_early = True

    def _settle(self, status: Status | None) -> Any:
        if self._settled:  # null: an empty status, as for REQUEST_NULL
            return super()._settle(status)
        filled = Status()
        self._op, self._settled = None, True
        try:
            self._call(self._query, filled)
        finally:
            self._call(self._free)
        if status is not None:  # source, tag and count: MPICH keeps neither the error nor the cancelled flag
            status._set(filled.source, filled.tag, filled._nbytes)
        value, self._value = self._value, None
        return value

    def _call(self, fn: Callable | None, *first: Any) -> None:
        if fn is None:
            return
        try:
            fn(*first, *self._args, **self._kwargs)
        except err.Exception as exc:
            traceback.print_exc(file=sys.stderr)
            raise err.Exception(exc.Get_error_class()) from None
        except Exception:
            traceback.print_exc(file=sys.stderr)
            raise err.Exception(err.ERR_OTHER) from None

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Grequest {'done' if self._done() else 'pending'}>"


__all__ = ["Grequest"]
