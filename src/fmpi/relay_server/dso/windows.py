"""``window``: one rank's segment of an MPI one-sided window, held by the relay (its public copy).

A relay-hosted ``MPI.Win`` (``api/win_relay.py``) keeps one of these per rank. The segment's
methods run here, one at a time, so each is atomic with respect to every other, as MPI requires of
accumulates; the target rank's process takes no part, so a passive-target access never waits for it.

Where a call reaches is ``offset`` plus ``runs``: ``[[start, length], ...]`` byte ranges relative to
the offset, in the order the origin's data is packed (a derived target datatype is a list of runs;
a basic one, a single run). Methods:

* ``create(size) + initial bytes``: makes the segment (``size`` bytes, charged to the job's quota).
* ``put(offset, runs) + bytes``, ``get(offset, runs)``.
* ``acc(offset, runs, dtype, op, fetch) + bytes``: segment = segment op bytes, elementwise in
  ``dtype`` with the numpy ufunc of ``op`` (``wire/reduce_ops.py``; also ``replace`` and
  ``no_op``); with ``fetch`` the reply carries the bytes from before.
* ``cas(offset, n) + compare + new``: the ``n`` bytes at offset become ``new`` if they equal
  ``compare``; the reply carries the old bytes.
* ``lock(type)`` (``shared`` or ``exclusive``): granted in request order, an exclusive lock alone;
  its reply waits (a future) until granted, but its client need not wait for it: the client's later
  calls on this segment are held here until the grant, then applied in order (so Lock, Put, Unlock
  costs one round trip). ``unlock()``. Locks belong to the client connection that took them: when
  it goes (the client exited or was killed) they are released (``release``).

Locks do not gate the data methods: MPI leaves conflicting accesses outside a lock undefined, so
the relay need not check what a correct program never does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from ...wire.reduce_ops import OPS, ufunc
from .base import DsoError, DsoObject, Reply, Result, arg, resolve
from .rounds import parse_dtype

if TYPE_CHECKING:
    from .store import Store

LOCK_TYPES = ("shared", "exclusive")


class Window(DsoObject):
    kind = "window"

    def __init__(self, store: "Store", size: int) -> None:
        super().__init__(store)
        self.store.charge(size)  # (refused: the object is not made)
        self.memory = bytearray(size)
        self.nbytes = size
        self.holders: dict[Any, str] = {}  # owner (a client connection) -> its lock type
        self.queue: deque[tuple[Any, str, asyncio.Future]] = deque()  # waiting lockers, in request order
        self.held: dict[Any, list[tuple[Any, dict, bytes, asyncio.Future]]] = {}  # a waiting locker's calls since

    # ---------------------------------------------------------------- where
    def _ranges(self, args: dict[str, Any]) -> list[tuple[int, int]]:
        offset = arg(args, "offset", int, 0)
        runs = arg(args, "runs", list, None)
        if runs is None:
            runs = [[0, arg(args, "n", int)]]
        out = []
        for run in runs:
            if not (isinstance(run, list) and len(run) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in run)):
                raise DsoError("bad_request", "runs must be [[start, length], ...] of integers")
            start, length = offset + run[0], run[1]
            if start < 0 or length < 0 or start + length > len(self.memory):
                raise DsoError("range", f"bytes {start}..{start + length} fall outside the {len(self.memory)}-byte window segment")
            out.append((start, length))
        return out

    def _gather(self, ranges: list[tuple[int, int]]) -> bytes:
        return b"".join(self.memory[s : s + n] for s, n in ranges)

    def _scatter(self, ranges: list[tuple[int, int]], data: bytes | memoryview) -> None:
        if sum(n for _, n in ranges) != len(data):
            raise DsoError("bad_request", f"{len(data)} bytes for {sum(n for _, n in ranges)} bytes of the window")
        pos = 0
        for s, n in ranges:
            self.memory[s : s + n] = data[pos : pos + n]
            pos += n

    # ------------------------------------------------------------- methods
    def create(self, args: dict[str, Any], payload: bytes) -> Result:
        if len(payload) > len(self.memory):
            raise DsoError("bad_request", f"{len(payload)} initial bytes for a {len(self.memory)}-byte segment")
        self.memory[: len(payload)] = payload
        return Reply({"size": len(self.memory)})

    def _hold(self, method: Any, args: dict[str, Any], payload: bytes) -> Result | None:
        """A call of a client whose lock on this segment waits: held until the grant (None: apply it now)."""
        calls = self.held.get(self.store.caller)
        if calls is None:
            return None
        fut = self.store.new_future()
        calls.append((method, args, payload, fut))
        return fut

    def put(self, args: dict[str, Any], payload: bytes) -> Result:
        if (held := self._hold(self.put, args, payload)) is not None:
            return held
        self._scatter(self._ranges(args), payload)
        return Reply({})

    def get(self, args: dict[str, Any], payload: bytes) -> Result:
        if (held := self._hold(self.get, args, payload)) is not None:
            return held
        return Reply({}, self._gather(self._ranges(args)))

    def acc(self, args: dict[str, Any], payload: bytes) -> Result:
        if (held := self._hold(self.acc, args, payload)) is not None:
            return held
        ranges = self._ranges(args)
        op = arg(args, "op", str)
        if op not in OPS and op not in ("replace", "no_op"):
            raise DsoError("bad_request", f"unknown op {op!r} (one of {', '.join(OPS)}, replace, no_op)")
        old = self._gather(ranges)
        if op == "no_op":
            new = old
        elif op == "replace":
            new = bytes(payload)
        else:
            dtype = parse_dtype(args.get("dtype"))
            if len(payload) != len(old) or len(old) % dtype.itemsize:
                raise DsoError("bad_request", f"{len(payload)} bytes of {dtype.str} onto {len(old)} bytes of the window")
            current, incoming = np.frombuffer(old, dtype), np.frombuffer(payload, dtype)
            with np.errstate(all="ignore"):  # (integer overflow wraps, as in MPI implementations)
                new = ufunc(op)(current, incoming).astype(dtype, copy=False).tobytes()
        self._scatter(ranges, new)
        return Reply({}, old if args.get("fetch") else None)

    def cas(self, args: dict[str, Any], payload: bytes) -> Result:
        if (held := self._hold(self.cas, args, payload)) is not None:
            return held
        n = arg(args, "n", int)
        ranges = self._ranges({"offset": arg(args, "offset", int), "n": n})
        if len(payload) != 2 * n:
            raise DsoError("bad_request", f"compare and swap of {n} bytes takes {2 * n} bytes (compare, new)")
        old = self._gather(ranges)
        if old == payload[:n]:
            self._scatter(ranges, payload[n:])
        return Reply({}, old)

    def lock(self, args: dict[str, Any], payload: bytes) -> Result:
        kind = arg(args, "type", str)
        if kind not in LOCK_TYPES:
            raise DsoError("bad_request", f"lock type must be one of {', '.join(LOCK_TYPES)}")
        owner = self.store.caller
        if owner in self.holders or any(o == owner for o, _, f in self.queue if not f.done()):
            raise DsoError("locked", "this client holds or awaits a lock on this window segment already")
        fut = self.store.new_future()
        self.queue.append((owner, kind, fut))
        self.held[owner] = []
        self._grant()
        return fut

    def unlock(self, args: dict[str, Any], payload: bytes) -> Result:
        if (held := self._hold(self.unlock, args, payload)) is not None:
            return held
        if self.holders.pop(self.store.caller, None) is None:
            raise DsoError("not_locked", "this client holds no lock on this window segment")
        self._grant()
        return Reply({})

    def release(self, owner: Any) -> None:
        """`owner`'s connection is gone: its lock, if any, is freed (its waiting lock requests were cancelled)."""
        self.held.pop(owner, None)
        if self.holders.pop(owner, None) is not None:
            self._grant()

    def _grant(self) -> None:
        while self.queue:
            owner, kind, fut = self.queue[0]
            if fut.done():  # (a locker that gave up: timeout, disconnect)
                self.queue.popleft()
                for *_, call in self.held.pop(owner, []):
                    if not call.done():
                        call.set_exception(DsoError("not_locked", "the lock this call waited for was given up"))
                continue
            held = set(self.holders.values())
            if held and (kind == "exclusive" or "exclusive" in held):
                return
            self.queue.popleft()
            self.holders[owner] = kind
            resolve(fut, Reply({"granted": kind}))
            for method, args, payload, call in self.held.pop(owner, []):  # (an unlock among them grants in turn)
                self.store.caller = owner
                try:
                    result = method(args, payload)
                except DsoError as exc:
                    if not call.done():
                        call.set_exception(exc)
                    continue
                assert isinstance(result, Reply)
                resolve(call, result)

    def waiters(self) -> list[asyncio.Future]:
        return [f for _, _, f in self.queue] + [call[-1] for calls in self.held.values() for call in calls]
