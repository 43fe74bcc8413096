"""Distributed shared objects (DSO) hosted by fmpi-relay: a job's store of objects, and its quota.

In the style of CRUCIAL: a job's ranks share named objects whose methods run
on the server, one at a time, so every method is linearizable. This module is
the pure logic — no sockets: the relay (``server.py``) decodes a DSO_CALL
frame into ``Store.call(...)`` and sends back what it returns.

A ``Store`` holds the objects of one job on one relay node. ``call`` returns
either a ``Reply`` at once or an ``asyncio.Future`` that resolves to one
(blocking methods: Mailbox.take, Barrier.wait, Reducer.contribute). Waiting is
nothing but that future: no task or thread per waiter. A future cancelled by
its owner (the client disconnected, or the wait timed out) is skipped, so
nothing is handed to a waiter that is gone. The objects and their methods
are in ``objects.py`` (and ``rounds.py``: barrier, reducer).

Memory is bounded per job (``max_bytes``) and per value (``max_value``);
what does not fit is refused with ``DsoError("too_large" | "quota")``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .objects import (
    METHODS,
    TYPES,
    Barrier,
    DsoError,
    DsoObject,
    Reducer,
    Reply,
    Result,
    Window,
)

# Bytes charged per object on top of its values, so that the number of objects is bounded too.
OBJECT_OVERHEAD = 256
MAX_NAME = 256
# Methods that do not create the object when it does not exist yet.
_READ_ONLY = {("counter", "get"), ("map", "get"), ("map", "keys"), ("map", "size"), ("map", "delete"), ("mailbox", "size")}


def _fail(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


class Store:
    """The objects of one job on one relay node."""

    def __init__(
        self,
        new_future: Callable[[], asyncio.Future],
        *,
        max_bytes: int = 256 << 20,
        max_value: int = 64 << 20,
    ) -> None:
        self.new_future = new_future
        self.max_bytes = max_bytes
        self.max_value = max_value
        self.used = 0
        self.objects: dict[str, DsoObject] = {}
        self.closed: DsoError | None = None
        # The client connection whose call runs now (methods run one at a time): window locks are its.
        self.caller: Any = None

    # ------------------------------------------------------------ accounting
    def charge(self, nbytes: int) -> None:
        if nbytes > 0 and self.used + nbytes > self.max_bytes:
            raise DsoError(
                "quota",
                f"the job's shared objects on this relay would hold {self.used + nbytes} bytes, "
                f"over its limit of {self.max_bytes} bytes",
            )
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        self.used -= nbytes

    # ----------------------------------------------------------------- calls
    def call(self, kind: str, name: str, method: str, args: dict[str, Any], payload: bytes = b"", caller: Any = None) -> Result:
        self.caller = caller
        if self.closed is not None:
            raise DsoError(self.closed.code, str(self.closed))
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise DsoError("bad_request", f"object names are 1 to {MAX_NAME} characters")
        if len(payload) > self.max_value:
            raise DsoError("too_large", f"a value of {len(payload)} bytes exceeds this relay's limit of {self.max_value} bytes")
        if not isinstance(method, str):
            raise DsoError("bad_request", "method must be a string")
        if method == "info" or method == "drop":
            return self._generic(name, method)
        if not isinstance(kind, str) or kind not in TYPES:
            raise DsoError("bad_request", f"unknown object type {kind!r} (one of {', '.join(TYPES)})")
        if method not in METHODS[kind]:
            raise DsoError("bad_request", f"a {kind} has no method {method!r} (it has {', '.join(sorted(METHODS[kind]))})")
        obj = self.objects.get(name)
        if obj is not None:
            if obj.kind != kind:
                raise DsoError("type", f"object {name!r} is a {obj.kind}, not a {kind}")
            return getattr(obj, method)(args, payload)
        if (kind, method) in _READ_ONLY:
            return self._absent(kind, method, name)
        if kind == "window" and method != "create":
            raise DsoError("unknown", f"no window segment {name!r} (created, then used: was it freed?)")
        obj = self._create(kind, name, args)
        try:
            return getattr(obj, method)(args, payload)
        except DsoError:
            if obj.nbytes == 0 and not obj.waiters():  # a refused first call leaves nothing behind
                del self.objects[name]
                self.release(OBJECT_OVERHEAD)
            raise

    def _create(self, kind: str, name: str, args: dict[str, Any]) -> DsoObject:
        cls = TYPES[kind]
        if cls in (Barrier, Reducer):
            n = args.get("n")
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 1 << 20:
                raise DsoError("bad_request", f"a {kind} needs its number of participants n (1 to {1 << 20})")
            self.charge(OBJECT_OVERHEAD)
            obj = cls(self, n)
        elif cls is Window:
            size = args.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise DsoError("bad_request", "a window segment needs its size in bytes")
            self.charge(OBJECT_OVERHEAD)
            try:
                obj = Window(self, size)
            except DsoError:
                self.release(OBJECT_OVERHEAD)
                raise
        else:
            self.charge(OBJECT_OVERHEAD)
            obj = cls(self)
        self.objects[name] = obj
        return obj

    @staticmethod
    def _absent(kind: str, method: str, name: str) -> Reply:
        if kind == "counter":
            return Reply({"value": 0})
        if method == "keys":
            return Reply({"keys": [], "total": 0})
        if method == "size":
            return Reply({"n": 0})
        return Reply({"found": False})

    def _generic(self, name: str, method: str) -> Reply:
        obj = self.objects.get(name)
        if method == "info":
            return Reply({"exists": obj is not None, "type": obj.kind if obj else None, "bytes": obj.nbytes if obj else 0})
        if obj is None:
            return Reply({"found": False})
        del self.objects[name]
        self.release(obj.nbytes + OBJECT_OVERHEAD)
        for fut in obj.waiters():
            _fail(fut, DsoError("dropped", f"object {name!r} was dropped"))
        return Reply({"found": True})

    def close(self, code: str, message: str) -> None:
        """The job ended or aborted: fail every waiter, free every object, refuse further calls."""
        if self.closed is not None:
            return
        self.closed = DsoError(code, message)
        objects, self.objects = self.objects, {}
        for obj in objects.values():
            for fut in obj.waiters():
                _fail(fut, DsoError(code, message))
        self.used = 0

    def disconnected(self, caller: Any) -> None:
        """`caller`'s connection is gone: the window locks it held are released."""
        for obj in list(self.objects.values()):
            if isinstance(obj, Window):
                obj.release(caller)

    def waiting(self) -> int:
        return sum(1 for obj in self.objects.values() for f in obj.waiters() if not f.done())
