"""The DSO objects whose calls meet in rounds: ``barrier`` (a generation completes when all n ranks arrived)
and ``reducer`` (a round's contributions are folded in rank order). Methods and semantics: ``objects.py``."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...wire.reduce_ops import OPS, ufunc
from .base import DsoError, DsoObject, Reply, Result, arg, resolve

if TYPE_CHECKING:
    import numpy as np

    from .store import Store

# numpy is imported where a reducer first needs it, not here: fmpirun embeds
# the relay, and a job that uses no reducer should not pay numpy's import
# before its ranks start.

# Completed barrier generations / reducer results remembered for late or retried callers.
KEEP_GENERATIONS = 1024
KEEP_ROUNDS = 2

_BITWISE = {"band", "bor", "bxor"}


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
        rank = arg(args, "rank", int)
        gen = arg(args, "generation", int)
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
                resolve(fut, Reply({"generation": gen}))
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
        rank = arg(args, "rank", int)
        key = arg(args, "round", int)
        op = arg(args, "op", str)
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
            resolve(fut, reply)
        return reply

    def _result_reply(self, key: int) -> Reply:
        dtype, result = self.results.done[key]
        return Reply({"round": key, "dtype": dtype.str}, result)

    def waiters(self) -> list[asyncio.Future]:
        return [f for rnd in self.rounds.values() for f in rnd.waiting]


def _check_n(obj: Barrier | Reducer, args: dict[str, Any]) -> None:
    n = args.get("n")
    if n is not None and n != obj.n:
        raise DsoError("mismatch", f"this {obj.kind} has {obj.n} participants, not {n}")
