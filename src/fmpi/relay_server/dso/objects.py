"""The shared objects a relay hosts for a job (mailbox, barrier, reducer, counter, map, window) and their methods.

Pure logic, no sockets: ``dso.Store`` holds a job's objects, routes each
call to a method here and charges what the objects hold to the job's quota.
A method returns a ``Reply`` at once or an ``asyncio.Future`` that resolves
to one (blocking methods: Mailbox.take, Barrier.wait, Reducer.contribute).

Objects (created on first use, typed by their first use):

* ``mailbox``: ``put(value)``, ``take(timeout)`` — FIFO; take blocks while empty.
* ``barrier``: ``wait(rank, generation, n)`` — returns when all ``n`` ranks
  arrived for that generation; a rank arriving twice counts once; a
  generation already complete returns at once.
* ``reducer``: ``contribute(rank, round, n, dtype, op) + bytes`` — the
  contributions of a round are folded with numpy ufuncs in rank order (so
  the result is bitwise deterministic, whatever the arrival order), and the
  result goes to every contributor once all ``n`` arrived. Keyed by (round,
  rank): a duplicate contribution is ignored (its caller still gets the result).
* ``counter``: ``add(delta)``, ``get()`` — atomic int64.
* ``map``: ``put(key, value)``, ``get(key)``, ``cas(key, expect, new)``,
  ``delete(key)``, ``keys(prefix)``, ``size()``.
* ``window``: one rank's segment of an MPI one-sided window (``windows.py``).
* any object: ``info()`` (does it exist, which type), ``drop()``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any

from ...wire.reduce_ops import OPS
from .base import INT64_MAX, INT64_MIN, MAX_KEY, DsoError, DsoObject, Reply, Result, arg
from .rounds import Barrier, Reducer
from .windows import Window

if TYPE_CHECKING:
    from .store import Store

__all__ = ["METHODS", "OPS", "TYPES", "Barrier", "DsoError", "DsoObject", "Reducer", "Reply", "Result", "Window"]


class Mailbox(DsoObject):
    kind = "mailbox"

    def __init__(self, store: "Store") -> None:
        super().__init__(store)
        self.items: deque[bytes] = deque()
        self.takers: deque[asyncio.Future] = deque()

    def put(self, args: dict[str, Any], payload: bytes) -> Result:
        while self.takers:
            fut = self.takers.popleft()
            if not fut.done():  # a taker that gave up (timeout, disconnect) is skipped
                fut.set_result(Reply({}, payload))
                return Reply({"delivered": True})
        self.store.charge(len(payload))
        self.items.append(payload)
        self.nbytes += len(payload)
        return Reply({"delivered": False})

    def take(self, args: dict[str, Any], payload: bytes) -> Result:
        if self.items:
            item = self.items.popleft()
            self.nbytes -= len(item)
            self.store.release(len(item))
            return Reply({}, item)
        if args.get("nowait"):
            raise DsoError("empty", "the mailbox is empty")
        fut = self.store.new_future()
        self.takers.append(fut)
        fut.add_done_callback(self._forget)
        return fut

    def _forget(self, fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            try:
                self.takers.remove(fut)
            except ValueError:
                pass

    def size(self, args: dict[str, Any], payload: bytes) -> Result:
        return Reply({"n": len(self.items)})

    def waiters(self) -> list[asyncio.Future]:
        return list(self.takers)


class Counter(DsoObject):
    kind = "counter"

    def __init__(self, store: "Store") -> None:
        super().__init__(store)
        self.value = 0

    def add(self, args: dict[str, Any], payload: bytes) -> Result:
        delta = arg(args, "delta", int, 1)
        value = self.value + delta
        if not INT64_MIN <= value <= INT64_MAX:
            raise DsoError("overflow", f"counter would leave the int64 range ({self.value} + {delta})")
        self.value = value
        return Reply({"value": value})

    def get(self, args: dict[str, Any], payload: bytes) -> Result:
        return Reply({"value": self.value})


class Map(DsoObject):
    kind = "map"

    def __init__(self, store: "Store") -> None:
        super().__init__(store)
        self.data: dict[str, bytes] = {}

    @staticmethod
    def _key(args: dict[str, Any]) -> str:
        key = arg(args, "key", str)
        if len(key) > MAX_KEY:
            raise DsoError("bad_request", f"map keys are at most {MAX_KEY} characters")
        return key

    def _set(self, key: str, value: bytes | None) -> None:
        old = self.data.get(key)
        old_cost = 0 if old is None else len(old) + len(key)
        new_cost = 0 if value is None else len(value) + len(key)
        if new_cost > old_cost:
            self.store.charge(new_cost - old_cost)  # may refuse: nothing changed yet
        else:
            self.store.release(old_cost - new_cost)
        self.nbytes += new_cost - old_cost
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value

    def put(self, args: dict[str, Any], payload: bytes) -> Result:
        key = self._key(args)
        replaced = key in self.data
        self._set(key, payload)
        return Reply({"replaced": replaced})

    def get(self, args: dict[str, Any], payload: bytes) -> Result:
        value = self.data.get(self._key(args))
        return Reply({"found": value is not None}, value)

    def cas(self, args: dict[str, Any], payload: bytes) -> Result:
        """Compare and set: if the value is `expect` (absent when expect_len is null), store `new` (delete when new is null).

        The payload is the expected bytes followed by the new bytes. Returns
        whether it swapped and the current value (after the call).
        """
        key = self._key(args)
        expect_len = args.get("expect_len")
        new_absent = bool(args.get("delete", False))
        if expect_len is not None and (not isinstance(expect_len, int) or not 0 <= expect_len <= len(payload)):
            raise DsoError("bad_request", "expect_len must be null or a length within the payload")
        expect = None if expect_len is None else payload[:expect_len]
        new = None if new_absent else payload[expect_len or 0 :]
        current = self.data.get(key)
        if current == expect if expect is not None else current is None:
            self._set(key, new)
            return Reply({"swapped": True, "found": new is not None}, new)
        return Reply({"swapped": False, "found": current is not None}, current)

    def delete(self, args: dict[str, Any], payload: bytes) -> Result:
        key = self._key(args)
        found = key in self.data
        if found:
            self._set(key, None)
        return Reply({"found": found})

    def keys(self, args: dict[str, Any], payload: bytes) -> Result:
        prefix = arg(args, "prefix", str, "")
        limit = arg(args, "limit", int, 10_000)
        keys = [k for k in self.data if k.startswith(prefix)]
        return Reply({"keys": keys[: max(0, limit)], "total": len(keys)})

    def size(self, args: dict[str, Any], payload: bytes) -> Result:
        return Reply({"n": len(self.data)})


TYPES: dict[str, type[DsoObject]] = {"mailbox": Mailbox, "barrier": Barrier, "reducer": Reducer, "counter": Counter, "map": Map,
                                   "window": Window}
METHODS: dict[str, frozenset[str]] = {
    "mailbox": frozenset({"put", "take", "size"}),
    "barrier": frozenset({"wait"}),
    "reducer": frozenset({"contribute"}),
    "counter": frozenset({"add", "get"}),
    "map": frozenset({"put", "get", "cas", "delete", "keys", "size"}),
    "window": frozenset({"create", "put", "get", "acc", "cas", "lock", "unlock"}),
}
