"""The shared objects a relay hosts for a job (mailbox, barrier, reducer, counter, map) and their methods.

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
* any object: ``info()`` (does it exist, which type), ``drop()``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from ...wire.reduce_ops import OPS, ufunc

if TYPE_CHECKING:
    import numpy as np

    from .store import Store

# numpy is imported where a reducer first needs it, not here: fmpirun embeds
# the relay, and a job that uses no reducer should not pay numpy's import
# before its ranks start.

MAX_KEY = 1024
# Completed barrier generations / reducer results remembered for late or retried callers.
KEEP_GENERATIONS = 1024
KEEP_ROUNDS = 2
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_BITWISE = {"band", "bor", "bxor"}


class DsoError(Exception):
    """A refused DSO call; ``code`` is what the client sees."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Reply:
    meta: dict[str, Any] = field(default_factory=dict)
    payload: bytes | memoryview | None = None


Result = Union[Reply, "asyncio.Future[Reply]"]


def parse_dtype(text: Any) -> np.dtype:
    """A plain numeric dtype from the wire (bool, ints, floats, complex; no objects, no records)."""
    if not isinstance(text, str) or not 0 < len(text) <= 16:
        raise DsoError("bad_request", "dtype must be a short numpy dtype string such as '<f8'")
    import numpy as np

    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError):
        raise DsoError("bad_request", f"unknown dtype {text!r}") from None
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise DsoError("bad_request", f"dtype {text!r} is not a plain numeric type")
    return dtype


def _arg(args: dict[str, Any], name: str, typ: type | tuple[type, ...], default: Any = ...) -> Any:
    if name not in args:
        if default is ...:
            raise DsoError("bad_request", f"missing argument {name!r}")
        return default
    value = args[name]
    if not isinstance(value, typ) or (isinstance(value, bool) and typ is not bool):
        raise DsoError("bad_request", f"argument {name!r} has the wrong type")
    return value




def _resolve(fut: asyncio.Future, reply: Reply) -> None:
    if not fut.done():
        fut.set_result(reply)


class DsoObject:
    kind = "?"

    def __init__(self, store: "Store") -> None:
        self.store = store
        self.nbytes = 0  # value bytes held (charged to the job)

    def waiters(self) -> list[asyncio.Future]:
        return []


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


class _Rounds:
    """Completed rounds (generations) remembered for late callers; older ones are 'forgotten' below a floor."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.done: OrderedDict[int, Any] = OrderedDict()
        self.floor: int | None = None  # every round <= floor completed and was forgotten

    def add(self, key: int, value: Any) -> list[Any]:
        self.done[key] = value
        evicted = []
        while len(self.done) > self.keep:
            old, val = self.done.popitem(last=False)
            self.floor = old if self.floor is None else max(self.floor, old)
            evicted.append(val)
        return evicted

    def forgotten(self, key: int) -> bool:
        return self.floor is not None and key <= self.floor and key not in self.done


class Barrier(DsoObject):
    kind = "barrier"

    def __init__(self, store: "Store", n: int) -> None:
        super().__init__(store)
        self.n = n
        self.arrived: dict[int, set[int]] = {}
        self.waiting: dict[int, list[asyncio.Future]] = {}
        self.completed = _Rounds(KEEP_GENERATIONS)

    def wait(self, args: dict[str, Any], payload: bytes) -> Result:
        rank = _arg(args, "rank", int)
        gen = _arg(args, "generation", int)
        _check_n(self, args)
        if not 0 <= rank < self.n:
            raise DsoError("bad_request", f"rank {rank} is outside the barrier of {self.n}")
        if gen in self.completed.done or self.completed.forgotten(gen):
            return Reply({"generation": gen})
        ranks = self.arrived.setdefault(gen, set())
        ranks.add(rank)  # a set: a rank arriving twice counts once
        if len(ranks) == self.n:
            del self.arrived[gen]
            self.completed.add(gen, True)
            for fut in self.waiting.pop(gen, ()):
                _resolve(fut, Reply({"generation": gen}))
            return Reply({"generation": gen})
        fut = self.store.new_future()
        self.waiting.setdefault(gen, []).append(fut)
        return fut

    def waiters(self) -> list[asyncio.Future]:
        return [f for futs in self.waiting.values() for f in futs]


@dataclass
class _Round:
    dtype: np.dtype
    op: str
    nbytes: int
    acc: np.ndarray | None = None  # the fold of ranks 0 .. next-1
    next: int = 0
    pending: dict[int, bytes] = field(default_factory=dict)  # arrived out of rank order
    seen: set[int] = field(default_factory=set)
    waiting: list[asyncio.Future] = field(default_factory=list)


class Reducer(DsoObject):
    kind = "reducer"

    def __init__(self, store: "Store", n: int) -> None:
        super().__init__(store)
        self.n = n
        self.rounds: dict[int, _Round] = {}
        self.results = _Rounds(KEEP_ROUNDS)

    def contribute(self, args: dict[str, Any], payload: bytes) -> Result:
        rank = _arg(args, "rank", int)
        key = _arg(args, "round", int)
        op = _arg(args, "op", str)
        dtype = parse_dtype(args.get("dtype"))
        _check_n(self, args)
        if not 0 <= rank < self.n:
            raise DsoError("bad_request", f"rank {rank} is outside the reducer of {self.n}")
        if op not in OPS:
            raise DsoError("bad_request", f"unknown op {op!r} (one of {', '.join(OPS)})")
        if op in _BITWISE and dtype.kind not in "biu":
            raise DsoError("bad_request", f"op {op!r} needs an integer or bool dtype, not {dtype.str}")
        if len(payload) % dtype.itemsize:
            raise DsoError("bad_request", f"{len(payload)} bytes are not a whole number of {dtype.str} elements")
        if key in self.results.done:  # complete: a late duplicate gets the result
            return self._result_reply(key)
        if self.results.forgotten(key):
            raise DsoError("expired", f"round {key} of reducer completed long ago; its result is no longer kept")
        rnd = self.rounds.get(key)
        if rnd is None:
            rnd = self.rounds[key] = _Round(dtype, op, len(payload))
        elif (rnd.dtype, rnd.op, rnd.nbytes) != (dtype, op, len(payload)):
            raise DsoError(
                "mismatch",
                f"round {key}: rank {rank} contributes {len(payload)} B of {dtype.str} with {op!r}, "
                f"others {rnd.nbytes} B of {rnd.dtype.str} with {rnd.op!r}",
            )
        if rank not in rnd.seen:  # keyed by (round, rank): a duplicate is not counted again
            self.store.charge(len(payload))
            rnd.seen.add(rank)
            rnd.pending[rank] = payload
            self.nbytes += len(payload)
            self._fold(rnd)
        if len(rnd.seen) == self.n:
            return self._complete(key, rnd)
        fut = self.store.new_future()
        rnd.waiting.append(fut)
        return fut

    def _fold(self, rnd: _Round) -> None:
        """Fold the contiguous prefix of ranks that has arrived: always rank 0, 1, 2, ... in order."""
        import numpy as np

        fold = ufunc(rnd.op)
        while rnd.next in rnd.pending:
            data = rnd.pending.pop(rnd.next)
            x = np.frombuffer(data, dtype=rnd.dtype)
            if rnd.acc is None:
                rnd.acc = x.copy()  # the held bytes move from `pending` into `acc`
            else:
                fold(rnd.acc, x, out=rnd.acc)
                self.store.release(len(data))
                self.nbytes -= len(data)
            rnd.next += 1

    def _complete(self, key: int, rnd: _Round) -> Reply:
        del self.rounds[key]
        assert rnd.acc is not None and rnd.next == self.n
        result = memoryview(rnd.acc).cast("B")  # sent as is, no copy
        # the accumulator's bytes stay charged while the result is kept
        for evicted in self.results.add(key, (rnd.dtype, result)):
            self.store.release(len(evicted[1]))
            self.nbytes -= len(evicted[1])
        reply = self._result_reply(key)
        for fut in rnd.waiting:
            _resolve(fut, reply)
        return reply

    def _result_reply(self, key: int) -> Reply:
        dtype, result = self.results.done[key]
        return Reply({"round": key, "dtype": dtype.str}, result)

    def waiters(self) -> list[asyncio.Future]:
        return [f for rnd in self.rounds.values() for f in rnd.waiting]


class Counter(DsoObject):
    kind = "counter"

    def __init__(self, store: "Store") -> None:
        super().__init__(store)
        self.value = 0

    def add(self, args: dict[str, Any], payload: bytes) -> Result:
        delta = _arg(args, "delta", int, 1)
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
        key = _arg(args, "key", str)
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
        prefix = _arg(args, "prefix", str, "")
        limit = _arg(args, "limit", int, 10_000)
        keys = [k for k in self.data if k.startswith(prefix)]
        return Reply({"keys": keys[: max(0, limit)], "total": len(keys)})

    def size(self, args: dict[str, Any], payload: bytes) -> Result:
        return Reply({"n": len(self.data)})


def _check_n(obj: Barrier | Reducer, args: dict[str, Any]) -> None:
    n = args.get("n")
    if n is not None and n != obj.n:
        raise DsoError("mismatch", f"this {obj.kind} has {obj.n} participants, not {n}")


TYPES: dict[str, type[DsoObject]] = {"mailbox": Mailbox, "barrier": Barrier, "reducer": Reducer, "counter": Counter, "map": Map}
METHODS: dict[str, frozenset[str]] = {
    "mailbox": frozenset({"put", "take", "size"}),
    "barrier": frozenset({"wait"}),
    "reducer": frozenset({"contribute"}),
    "counter": frozenset({"add", "get"}),
    "map": frozenset({"put", "get", "cas", "delete", "keys", "size"}),
}
