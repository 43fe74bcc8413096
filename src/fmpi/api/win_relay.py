"""Windows whose memory lives on the relay: the public copy of each rank's window is a DSO ``window`` object.

Chosen per window with the Info key ``fmpi_memory=relay`` on ``Win.Create``/``Win.Allocate`` (``fmpi_memory=local``
asks for the usual window), or for every such window with ``FMPI_WIN_MEMORY=relay``. The job's relay must be an
fmpi-relay (its DSO objects): with a Redis relay, or outside fmpirun, creation fails with ``ERR_UNSUPPORTED_OPERATION``
on every rank. Each rank's segment is the object ``fmpi.w.<window id>.<rank>`` (``relay_server/dso/windows.py``);
the relay applies every Put, Get, Accumulate, Get_accumulate, Fetch_and_op and Compare_and_swap atomically and grants
the locks, so a passive-target access never waits for its target's process, which may compute, sleep or be stopped.

Memory model: ``WIN_SEPARATE`` (MPI-4 §12.4). The *private* copy is the rank's own buffer (what it loads and stores);
the *public* copy is the relay's segment, which every RMA operation reads and writes — the own rank's too. The rule
implemented (§12.7, rules 2 to 6, taken at their latest-allowed point or earlier):

* *push* (private -> public: the bytes the rank stored into its buffer since the last synchronization, found by
  comparing it with a snapshot; only those, so RMA updates of other bytes are not overwritten) at Fence (before its
  barrier), Post, Win.Sync, Unlock and Unlock_all (of a lock that covers the own rank, before releasing it), Lock and
  Lock_all of the own rank (after the grant), Wait and a successful Test;
* *pull* (public -> private, then a new snapshot) right after each push above, except at Unlock (the lock ends:
  §12.7 asks the private copy to show RMA updates at the next Fence, Wait, Lock or Sync); at Fence after its barrier,
  when every rank's operations of the epoch are on the relay.

An origin's operations go out on its connection to the relay without waiting (puts and accumulates); the relay
applies one connection's calls in order, and Flush, Unlock, Fence and Complete wait for the answers of everything
sent before them. A Lock of another rank's window does not wait for the grant: the relay holds the origin's calls on
that segment until it grants the lock, so Lock, Put, Unlock is one round trip. Windows of ``Allocate_shared`` and ``Create_dynamic`` stay in the ranks' memory.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from . import exceptions as err
from . import runtime
from .buffers import message
from .rma_target import ACC, CAS, GET, GET_ACC, PUT

INFO_KEY = "fmpi_memory"
_RELAY_OPS = {"SUM", "PROD", "MAX", "MIN", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR", "REPLACE", "NO_OP"}


def wanted(info: Any) -> bool:
    """Whether a window created with `info` keeps its memory on the relay (the Info key, else FMPI_WIN_MEMORY)."""
    from .. import settings

    value = None
    if info is not None:
        try:
            value = info.get(INFO_KEY) if isinstance(info, dict) else info.Get(INFO_KEY)
        except (AttributeError, err.Exception):
            value = None  # (INFO_NULL)
    if value is None:
        value = settings.current().win_memory
    value = str(value).strip().lower()
    if value not in ("relay", "local"):
        raise err.Exception(err.ERR_INFO_VALUE, f"{INFO_KEY} must be relay or local, not {value!r}")
    return value == "relay"


def _failure(exc: BaseException) -> err.Exception:
    code = getattr(exc, "code", None)
    if isinstance(exc, err.Exception):
        return exc
    if code == "quota":
        return err.Exception(err.ERR_NO_MEM, f"relay-hosted window: {exc}")
    if code == "range":
        return err.Exception(err.ERR_RMA_RANGE, f"relay-hosted window: {exc}")
    return err.Exception(err.ERR_WIN, f"relay-hosted window: {exc}")


class RelayMemory:
    """The relay side of one window (see the module docstring); ``Win`` calls it where a local window would
    message its targets. Collective: every rank of the window makes its segment, then all check all did."""

    def __init__(self, w: Any) -> None:
        provider = runtime.state.server
        if getattr(provider, "window", None) is None:
            where = "no relay (outside fmpirun)" if provider is None else f"a {getattr(provider, 'kind', '?')} relay"
            raise err.Exception(err.ERR_UNSUPPORTED_OPERATION, "a window whose memory lives on the relay needs the job's "
                                f"relay to be an fmpi-relay (its shared objects); this job has {where}")
        self.w = w
        self.errors = provider.errors
        base = w.sync.bcast(uuid.uuid4().hex if w.me == 0 else None)
        self.segments = [provider.window(f"fmpi.w.{base}.{rank}") for rank in range(len(w.sizes))]
        self.pending: list[Any] = []  # operations sent and not yet answered
        failed = None
        try:
            # (the relay zero-fills: trailing zeros need not travel, and Allocate's memory is all zeros)
            self.segments[w.me].create(w.size, bytes(w.view).rstrip(b"\0"))
        except self.errors as exc:
            failed = _failure(exc)
        problems = w.sync.allgather(None if failed is None else str(failed))
        if failed is not None:
            raise failed
        if any(problems):
            self.segments[w.me].drop()
            raise err.Exception(err.ERR_WIN, f"relay-hosted window: another rank failed: {next(p for p in problems if p)}")
        self.snapshot = bytes(w.view)

    # ------------------------------------------------------------ operations
    def _where(self, rank: int, disp: int, count: int, datatype: Any) -> tuple[int, list]:
        """(byte offset, runs) of `count` x `datatype` at `disp` of `rank`'s segment, in packing order."""
        offset = disp * self.w.sizes[rank][1]
        size = datatype.Get_size()
        if datatype._t.contiguous or count == 0:
            return offset, [[0, count * size]]
        _, extent = datatype.Get_extent()
        lb, true_extent = datatype.Get_true_extent()
        span = (count - 1) * extent + lb + true_extent
        index = np.arange(span, dtype=np.int64)
        position = np.zeros(count * size, dtype=np.int64)
        for shift in range(0, max(8, int(span).bit_length()), 8):  # the span's byte indices, one byte plane at a time
            plane = ((index >> shift) & 0xFF).astype(np.uint8)
            position |= np.frombuffer(message([plane, count, datatype], False).view, np.uint8).astype(np.int64) << shift
        breaks = np.flatnonzero(np.diff(position) != 1) + 1
        starts = np.concatenate(([0], breaks))
        ends = np.concatenate((breaks, [len(position)]))
        return offset, [[int(position[s]), int(e - s)] for s, e in zip(starts, ends)]

    def send(self, rank: int, kind: int, args: tuple) -> None:
        """A put or an accumulate: sent, not awaited (Flush and the other synchronizations wait for it)."""
        if kind == PUT:
            disp, count, datatype, data = args
            offset, runs = self._where(rank, disp, count, datatype)
            self.pending.append(self._call(lambda: self.segments[rank].put_async(offset, runs, data)))
        else:
            assert kind == ACC
            disp, count, datatype, op_name, data = args
            offset, runs = self._where(rank, disp, count, datatype)
            self.pending.append(self._call(lambda: self.segments[rank].acc_async(
                offset, runs, _dtype(datatype, op_name), _op(op_name), data, False)))

    def ask(self, rank: int, kind: int, args: tuple) -> bytes:
        """A get, get-accumulate or compare-and-swap: its answer (the target's bytes)."""
        segment = self.segments[rank]
        if kind == GET:
            disp, count, datatype = args
            offset, runs = self._where(rank, disp, count, datatype)
            return self._result(self._call(lambda: segment.get_async(offset, runs)))
        if kind == GET_ACC:
            disp, count, datatype, op_name, data = args
            offset, runs = self._where(rank, disp, count, datatype)
            op = _op(op_name)
            return self._result(self._call(lambda: segment.acc_async(offset, runs, _dtype(datatype, op_name), op, data, True)))
        assert kind == CAS
        disp, datatype, compare, new = args
        offset = disp * self.w.sizes[rank][1]
        return self._call(lambda: segment.cas(offset, bytes(compare), bytes(new)))

    def _call(self, start: Any) -> Any:
        try:
            return start()
        except self.errors as exc:
            raise _failure(exc) from None

    def _result(self, pending: Any) -> Any:
        return self._call(pending.result)

    def complete(self) -> None:
        """Wait for every operation sent (Flush, Flush_all, Unlock, Fence, Complete)."""
        pending, self.pending = self.pending, []
        problems = []
        for call in pending:
            try:
                self._result(call)
            except err.Exception as exc:
                problems.append(exc)
        if problems:
            raise problems[0]

    # -------------------------------------------------------------- locks
    def lock(self, rank: int, exclusive: bool) -> None:
        if rank == self.w.me:
            self._call(lambda: self.segments[rank].lock(exclusive))
            self.sync()  # (after the grant: the private copy then shows the RMA updates)
        else:
            # Lazy, as MPI allows: the relay holds this rank's calls on the segment until it grants the lock.
            self.pending.append(self._call(lambda: self.segments[rank].lock_async(exclusive)))

    def unlock(self, ranks: list[int]) -> None:
        """Unlock `ranks` (Unlock: one; Unlock_all: every rank), all at once, then wait for everything sent."""
        if self.w.me in ranks:
            self.push()
        for rank in ranks:
            # (after this origin's operations on the same connection, which the relay applies in order: no wait between)
            self.pending.append(self._call(self.segments[rank].unlock_async))
        self.complete()

    # ------------------------------------------------ private <-> public
    def push(self) -> None:
        """The bytes this rank stored into its buffer since the last synchronization, onto the relay."""
        view = self.w.view
        if not len(view):
            return
        now = np.frombuffer(view, np.uint8)
        changed = now != np.frombuffer(self.snapshot, np.uint8)
        if not changed.any():
            return
        edges = np.flatnonzero(np.diff(np.concatenate(([0], changed.view(np.int8), [0]))))
        runs = [[int(s), int(e - s)] for s, e in zip(edges[::2], edges[1::2])]
        data = np.concatenate([now[s : s + n] for s, n in runs])
        self._result(self._call(lambda: self.segments[self.w.me].put_async(0, runs, data)))
        self.snapshot = bytes(view)

    def pull(self) -> None:
        """The relay's segment into this rank's buffer (the updates of RMA operations become visible)."""
        view = self.w.view
        if len(view):
            data = self._result(self._call(lambda: self.segments[self.w.me].get_async(0, [[0, len(view)]])))
            view[:] = data
            self.snapshot = data

    def sync(self) -> None:
        self.push()
        self.pull()

    def fence(self) -> None:
        self.complete()
        self.push()
        self.w.sync.Barrier()
        self.pull()

    def free(self) -> None:
        self.complete()
        self.w.sync.Barrier()  # (nobody accesses this rank's segment any more)
        try:
            self.segments[self.w.me].drop()
        except self.errors:
            pass  # the relay is gone: so is the segment


def _op(name: str) -> str:
    if name not in _RELAY_OPS:
        raise err.Exception(err.ERR_OP, f"a relay-hosted window cannot apply MPI.{name} (it applies the predefined "
                            "arithmetic, bitwise and logical ops, REPLACE and NO_OP)")
    return name.lower()


def _dtype(datatype: Any, op_name: str) -> str | None:
    """The element type the relay folds in (None where it moves bytes only: REPLACE, NO_OP)."""
    if op_name in ("REPLACE", "NO_OP"):
        return None
    dtype = datatype.dtype
    if dtype is None:
        raise err.Exception(err.ERR_TYPE, "a relay-hosted window accumulates elements of one predefined type only")
    if dtype.kind not in "biufc" or not dtype.isnative:
        raise err.Exception(err.ERR_TYPE, f"a relay-hosted window cannot accumulate elements of {dtype}")
    return dtype.str
