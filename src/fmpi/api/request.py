"""``MPI.Request``: a handle on a non-blocking operation.

A request wraps one transport op (or an op that a background collective
completes) and a ``finish`` function that turns the completed op into the
user's result: the unpickled object of an ``irecv``, and the status fields in
the communicator's rank numbering.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..transport.engine import Engine
from ..transport.requests import Op, TransportError
from . import exceptions as err
from . import handles
from .constants import ANY_SOURCE, ANY_TAG, PROC_NULL, UNDEFINED
from .status import Status

# finish(op) -> (value, source, tag, nbytes)
Finish = Callable[[Op], tuple[Any, int, int, int]]


def _no_result(op: Op) -> tuple[Any, int, int, int]:
    return None, ANY_SOURCE, ANY_TAG, 0


def raise_mpi(exc: TransportError) -> None:
    raise err.from_transport(exc) from None


class Request:
    """Request: the handle of a nonblocking operation, to wait on or test."""
    # `_same`: the request this one is a copy of (``MPI.Request(req)``), None for an original: copies of
    # one request compare equal, as handles of one MPI_Request do.
    __slots__ = ("_engine", "_op", "_finish", "_result", "_settled", "_same", "__weakref__")

    def __new__(cls, *args: Any, **kwargs: Any) -> "Request":
        """Taking the constructor's arguments, as mpi4py's ``__new__`` does (see ``handles.Handled``)."""
        return super().__new__(cls)

    def __init__(self, engine: "Engine | Request | None" = None, op: Op | None = None, finish: Finish = _no_result) -> None:
        self._same: Request | None = None
        if op is None and engine is not None:  # MPI.Request(req): another handle on the same request
            if not isinstance(engine, Request):
                raise TypeError(f"expecting a request, not {type(engine).__name__}")
            for slot in ("_engine", "_op", "_finish", "_result", "_settled"):
                setattr(self, slot, getattr(engine, slot))
            self._same = engine._same or engine
            if engine and self._settled:  # an inactive persistent request: a live handle all the same
                self._settled = False
            return
        self._engine = engine
        self._op = op
        self._finish = finish
        self._result: tuple[Any, int, int, int] | None = None
        self._settled = op is None

    @classmethod
    def completed(cls, value: Any = None, source: int = PROC_NULL, tag: int = ANY_TAG, nbytes: int = 0) -> "Request":
        """
        Return a request that is already done (operations with PROC_NULL, for instance)."""
        req = cls()
        req._result = (value, source, tag, nbytes)
        req._settled = False
        return req

    # ------------------------------------------------------------------ state
    def _done(self) -> bool:
        return self._op is None or self._op.done

    def _settle(self, status: Status | None) -> Any:
        """Run `finish` once; fill `status`; raise the op's error as MPI.Exception."""
        if self._op is not None and self._op.error is not None:
            if status is not None:
                status.error = err.from_class_name(self._op.error.error_class)
            error = self._op.error
            self._op = None
            self._settled = True
            raise_mpi(error)
        if self._result is None:
            self._result = self._finish(self._op) if self._op is not None else (None, ANY_SOURCE, ANY_TAG, 0)
        # A request completed before is REQUEST_NULL now: waiting again gives None and an empty status, as in mpi4py.
        value, source, tag, nbytes = (None, ANY_SOURCE, ANY_TAG, 0) if self._settled else self._result
        if status is not None:
            cancelled = bool(self._op is not None and self._op.cancelled)
            status._set(source, tag, nbytes, 0, cancelled)
        self._op = None
        self._settled = True
        return value

    # ------------------------------------------------------------ user calls
    # Wait and Test call Request's wait and test, not a subclass's (mpi4py's test_subclass overrides
    # them to call Wait and Test without a status).
    def Wait(self, status: Status | None = None) -> bool:
        """
        Wait for the request to complete, filling `status` if given."""
        Request.wait(self, status)
        return True

    def wait(self, status: Status | None = None) -> Any:
        """
        Wait for the request to complete and return its value (a received object, or None)."""
        self._wait_op()
        return self._settle(status)

    def Test(self, status: Status | None = None) -> bool:
        """
        Tell whether the request has completed, filling `status` if it has."""
        return Request.test(self, status)[0]

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        """
        Return (whether the request has completed, its value if it has)."""
        if not self._done():
            return False, None
        return True, self._settle(status)

    def Get_status(self, status: Status | None = None) -> bool:
        """
        Tell whether the request has completed, filling `status` if so, without freeing it."""
        if not self._done():
            return False
        if status is not None and self._result is not None:
            value, source, tag, nbytes = self._result
            status._set(source, tag, nbytes)
        return True

    def get_status(self, status: Status | None = None) -> bool:
        """
        Tell whether the request has completed, without freeing it (Get_status's lowercase form)."""
        return self.Get_status(status)


    @classmethod
    def Get_status_all(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> bool:
        """
        Raise NotImplementedError: MPI 4.1's, and fmpi reports MPI 3.1, as mpi4py does over such a library."""
        raise NotImplementedError("MPI_Request_get_status_all (MPI 4.1)")

    @classmethod
    def Get_status_any(cls, requests: Sequence["Request"], status: Status | None = None) -> tuple[int, bool]:
        """
        Raise NotImplementedError: MPI 4.1's, and fmpi reports MPI 3.1, as mpi4py does over such a library."""
        raise NotImplementedError("MPI_Request_get_status_any (MPI 4.1)")

    @classmethod
    def Get_status_some(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> list[int] | None:
        """
        Raise NotImplementedError: MPI 4.1's, and fmpi reports MPI 3.1, as mpi4py does over such a library."""
        raise NotImplementedError("MPI_Request_get_status_some (MPI 4.1)")

    get_status_all, get_status_any, get_status_some = Get_status_all, Get_status_any, Get_status_some

    def Cancel(self) -> None:
        """
        Ask that the operation be cancelled (a wait still completes it; its status tells whether it was)."""
        if not self:
            raise err.Exception(err.ERR_REQUEST, "Cancel on a null request (REQUEST_NULL)")
        if self._op is not None and self._engine is not None:
            self._engine.cancel(self._op)

    cancel = Cancel

    def Free(self) -> None:
        """
        Free the request: the handle becomes null and the operation goes on unobserved."""
        if not self:
            raise err.Exception(err.ERR_REQUEST, "Free on a null request (REQUEST_NULL)")
        self._op = None
        self._settled = True

    def free(self) -> None:
        """
        Free unless null (mpi4py's lowercase form)."""
        if self:
            self.Free()

    def __bool__(self) -> bool:
        """False for a null request (MPI_REQUEST_NULL), like mpi4py."""
        return not self._settled

    def __eq__(self, other: object) -> bool:
        """Handles compare as in mpi4py: the same request, or both null (REQUEST_NULL)."""
        if not isinstance(other, Request):
            return NotImplemented
        if other is self or (not self and not other):
            return True
        return bool(self) and bool(other) and (self._same or self) is (other._same or other)

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def __reduce__(self) -> str | tuple:
        """
        Pickle REQUEST_NULL by name (another null handle, as another of its class).

        A live request is this process's, so it cannot be pickled, as in mpi4py."""
        if self:
            raise ValueError(f"cannot pickle a live {type(self).__name__}")
        return "REQUEST_NULL" if self is REQUEST_NULL else (type(self), ())

    # ------------------------------------------------------- handles (mpi4py's C and Fortran conversions)
    @property
    def handle(self) -> int:
        """This request's integer handle (0: REQUEST_NULL); copies of one request share it."""
        return handles.number(self._same or self) if self else handles.NULL

    @classmethod
    def fromhandle(cls, handle: int) -> "Request":
        """
        Return a handle on the request `handle` names (``cls()``, a null request, for 0)."""
        return cls() if handle == handles.NULL else cls(handles.lookup(handle, "request"))

    def toint(self) -> int:
        """
        Return the request's integer handle."""
        return self.handle

    def py2f(self) -> int:
        return self.handle

    fromint = f2py = fromhandle

    def _wait_op(self) -> None:
        if self._op is not None and not self._op.done:
            try:
                self._engine.wait(self._op)
            except TransportError:
                pass  # the op carries its error; _settle raises it

    # ------------------------------------------------------ many requests
    @staticmethod
    def _engine_of(requests: Sequence["Request"]) -> Engine | None:
        return next((r._engine for r in requests if r._op is not None and r._engine is not None), None)

    @classmethod
    def Waitall(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> bool:
        """
        Wait for all `requests` to complete, filling `statuses` if given."""
        cls.waitall(requests, statuses)
        return True

    @classmethod
    def waitall(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> list[Any]:
        """
        Wait for all `requests` to complete and return the list of their values."""
        engine = cls._engine_of(requests)
        if engine is not None:
            try:
                engine.wait_all([r._op for r in requests if r._op is not None])
            except TransportError:
                pass
        if isinstance(statuses, list):
            statuses.extend(Status() for _ in range(len(requests) - len(statuses)))
        given = len(statuses) if statuses is not None else 0
        return [r._settle(statuses[i] if i < given else None) for i, r in enumerate(requests)]

    @classmethod
    def Waitany(cls, requests: Sequence["Request"], status: Status | None = None) -> int:
        """
        Wait for one of `requests` to complete and return its index (UNDEFINED if none is active)."""
        return cls.waitany(requests, status)[0]

    @classmethod
    def waitany(cls, requests: Sequence["Request"], status: Status | None = None) -> tuple[int, Any]:
        """
        Wait for one of `requests` to complete and return (its index, its value)."""
        active = [(i, r) for i, r in enumerate(requests) if not r._settled]  # (an inactive persistent request is not)
        if not active:
            return UNDEFINED, None
        ready = [i for i, r in active if r._done()]
        if not ready:
            engine = cls._engine_of([r for _, r in active])
            k = engine.wait_any([r._op for _, r in active])
            ready = [active[k][0]]
        index = ready[0]
        return index, requests[index]._settle(status)

    @classmethod
    def _some(cls, requests: Sequence["Request"], statuses: list[Status] | None, block: bool) -> tuple[list[int] | None, list[Any] | None]:
        """
        Return (indices, values) of the active requests complete now, after waiting for one if `block`.

        Each is settled; a `statuses` list gets one status per completed request, in the same order."""
        active = [(i, r) for i, r in enumerate(requests) if not r._settled]
        if not active:
            return None, None
        if block and not any(r._done() for _, r in active):
            cls._engine_of([r for _, r in active]).wait_any([r._op for _, r in active])
        done = [i for i, r in active if r._done()]
        if isinstance(statuses, list):
            statuses.extend(Status() for _ in range(len(done) - len(statuses)))
        given = len(statuses) if statuses is not None else 0
        return done, [requests[i]._settle(statuses[k] if k < given else None) for k, i in enumerate(done)]

    @classmethod
    def Waitsome(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> list[int] | None:
        """
        Wait for at least one of `requests` to complete and return the indices of those complete."""
        return cls._some(requests, statuses, block=True)[0]

    @classmethod
    def waitsome(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> tuple[list[int] | None, list[Any] | None]:
        """
        Wait for at least one of `requests` to complete and return (indices, values) of those complete."""
        return cls._some(requests, statuses, block=True)

    @classmethod
    def testsome(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> tuple[list[int] | None, list[Any] | None]:
        """
        Return (indices, values) of the `requests` complete now."""
        return cls._some(requests, statuses, block=False)

    @classmethod
    def Testall(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> bool:
        """
        Tell whether all `requests` have completed, filling `statuses` if they have."""
        return cls.testall(requests, statuses)[0]

    @classmethod
    def testall(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> tuple[bool, list[Any] | None]:
        """
        Return (whether all `requests` have completed, the list of their values if they have)."""
        if not all(r._done() for r in requests):
            return False, None
        return True, cls.waitall(requests, statuses)

    @classmethod
    def Testany(cls, requests: Sequence["Request"], status: Status | None = None) -> tuple[int, bool]:
        """
        Return (index of a completed request or UNDEFINED, whether one completed or none is active)."""
        index, flag, _ = cls.testany(requests, status)
        return index, flag

    @classmethod
    def testany(cls, requests: Sequence["Request"], status: Status | None = None) -> tuple[int, bool, Any]:
        """
        Return (index of a completed request or UNDEFINED, whether one has, its value)."""
        active = [(i, r) for i, r in enumerate(requests) if not r._settled]  # (an inactive persistent request is not)
        if not active:
            return UNDEFINED, True, None
        for i, r in active:
            if r._done():
                return i, True, r._settle(status)
        return UNDEFINED, False, None

    @classmethod
    def Testsome(cls, requests: Sequence["Request"], statuses: list[Status] | None = None) -> list[int] | None:
        """
        Return the indices of the `requests` complete now."""
        return cls._some(requests, statuses, block=False)[0]

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Request {'done' if self._done() else 'pending'}>"


REQUEST_NULL = Request()
