"""Server-side collectives of fmpi communicators on the DSO relay nodes (a ``collectives/server_side.Provider``)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..rendezvous.relay_connection import RelayError
from .client import DsoClient
from .hangups import HangupWatch
from .node_connection import (
    NodeConnection,
    Pending,
    SharedObjectError,
    SharedObjectTimeout,
)

# Starts one call (a barrier arrival, a contribution) with a timeout (None: the client's); calls are idempotent.
Start = Callable[..., Pending]


class DsoCollectives:
    """Barrier and allreduce of fmpi communicators on the DSO relay (``collectives/server_side.Provider``).

    Each communicator has a Barrier ``fmpi.b.<key>`` and Reducers
    ``fmpi.r.<key>.<piece>``; the round is the collective call's number. A
    reduction of more than `piece` bytes is cut into pieces, one Reducer each,
    all in flight at once: the pieces' names hash onto different relay nodes,
    so a large allreduce spreads over every node of ``tcp://a:7000,b:7000``
    (and stays under the relay's value limit). A call that waits past
    `timeout` is repeated: a repeated arrival or contribution counts once and
    gets the result, so a rank may wait at a barrier as long as it must.

    A node that restarts mid-job comes back empty. Every call here is
    idempotent, so a rank whose connection to it was lost reconnects (the
    launcher hosts the job there again, ``DsoHost``), replays the last call
    it completed on each object of that node, and repeats the call it was
    in: a round that completed just before the restart, but whose result
    some rank never received, completes again from the replays, and nothing
    is counted twice. The replays need each object's last contribution, so
    a rank keeps a copy of it. The first node holds the job itself: after
    its restart the launcher creates the job there again, and ranks retry
    until it has. `recover_within` bounds the wait for a node to come back.

    The client connects on first use: creating this costs nothing.
    """

    kind = "dso"
    errors = (RelayError, OSError)  # (what collectives/server_side turns into MPI errors)

    def __init__(
        self,
        relays: str | Sequence[str],
        job: str,
        token: str,
        *,
        piece: int = 4 << 20,
        timeout: float = 30.0,
        recover_within: float = 30.0,
    ) -> None:
        self.client = DsoClient(relays, job, token, timeout=timeout)
        self.where = ",".join(f"{self.client.scheme}://{h}:{p}" for h, p in self.client.addresses)
        self.piece = piece
        self.recover_within = recover_within
        self.calls: dict[str, int] = {}
        # object name -> [its last call this rank completed, its call in flight], as calls to replay (see _recover)
        self._journal: dict[str, list[Start | None]] = {}
        self._journal_lock = threading.Lock()
        self._hangups: HangupWatch | None = None  # (started with the first call)

    def _finish(self, name: str, start: Start, pending: Pending | None = None, deadline: float | None = None) -> Any:
        """Wait for the call `start` makes (or made: `pending`), repeating it while the server times it out
        (until `deadline`, if any: then SharedObjectTimeout) or its node restarts."""
        while True:
            try:
                return (pending or start(self._left(deadline))).result()
            except SharedObjectTimeout:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                # the server gave up waiting, not the job: arrive again (idempotent)
            except SharedObjectError as exc:
                if exc.code != "lost":
                    raise
                self._recover(self.client.ring.node(name))
            except RelayError as exc:
                if not self.client.coming_back(exc, name):
                    raise
                self._recover(self.client.ring.node(name))  # (waits for the node, as for a lost connection)
            pending = None

    def _left(self, deadline: float | None) -> float | None:
        """The timeout of a call that must end by `deadline` (None: the client's)."""
        return None if deadline is None else max(0.0, min(self.client.timeout, deadline - time.monotonic()))

    def _try(self, name: str, start: Start, deadline: float | None) -> Pending | None:
        """Start a call on `name`; None if its node's connection is lost or its node is restarting
        (``_finish`` recovers and starts it again)."""
        try:
            return start(self._left(deadline))
        except SharedObjectError as exc:
            if exc.code != "lost":
                raise
            return None
        except RelayError as exc:
            if not self.client.coming_back(exc, name):
                raise
            return None

    # ---------------------------------------------------- node restarts
    def _begin(self, name: str, replay: Start) -> None:
        """A call on `name` starts; `replay` repeats it."""
        if self._hangups is None:
            self._watch_hangups()
        with self._journal_lock:
            self._journal.setdefault(name, [None, None])[1] = replay

    def _end(self, name: str, replay: Start) -> None:
        """The call on `name` completed (its result is here); `replay` repeats it without the caller's buffers."""
        with self._journal_lock:
            self._journal[name] = [replay, None]

    def _watch_hangups(self) -> None:
        with self._journal_lock:
            if self._hangups is None:
                self._hangups = HangupWatch(self.client.connections, self._hung_up)
                self.client.on_new_connection = self._hangups.changed

    def _hung_up(self, node: str, conn: NodeConnection) -> None:
        try:
            self._recover(node, conn)
        except RelayError:
            pass  # it did not come back: the next call on it says so

    def _recover(self, node: str, lost: NodeConnection | None = None) -> None:
        """Reconnect to `node`; the thread that does replays the calls of the journal on that node's objects.

        Calls on one object follow each other on a rank, so another rank can
        need only the round this rank completed last (its result was lost on
        the way to that rank) or the one in flight (it completed on the old
        node just now): both are replayed. A round completes once every rank
        has replayed or repeated it, and nobody counts twice.
        """
        if not self.client.reconnect(node, self.recover_within, lost):
            return
        with self._journal_lock:
            replays = [
                start for other, calls in self._journal.items() if self.client.ring.node(other) == node for start in calls if start
            ]
        try:
            for start in replays:
                start()  # (its reply is not awaited: it only restores the round for whoever still waits on it)
        except RelayError:
            pass  # the new connection is lost too: the call that goes on it finds out, and recovers again

    # ---------------------------------------------------- the collectives
    def barrier(self, comm_key: str, generation: int, rank: int, size: int, deadline: float | None = None) -> None:
        name = f"fmpi.b.{comm_key}"

        def start(timeout: float | None = None) -> Pending:
            return self.client.barrier_async(name, generation, rank, size=size, timeout=timeout)

        self._begin(name, start)
        self._finish(name, start, None, deadline)
        self._end(name, start)
        self.calls["barrier"] = self.calls.get("barrier", 0) + 1

    def allreduce(
        self, comm_key: str, round: int, rank: int, size: int, send: np.ndarray, op: str, out: np.ndarray,
        deadline: float | None = None,
    ) -> None:
        src = np.ascontiguousarray(send).reshape(-1)
        if src is out.reshape(-1) or np.shares_memory(src, out):
            src = src.copy()  # in place: the first piece's result must not overwrite later pieces' input
        flat = out.reshape(-1)  # a view: the callers pass flat, contiguous buffers
        step = max(1, self.piece // max(1, src.itemsize))
        bounds = [(lo, min(lo + step, src.size)) for lo in range(0, src.size, step)]
        names = [f"fmpi.r.{comm_key}.{i}" for i in range(len(bounds))]

        def starter(i: int, data: np.ndarray, into: np.ndarray | None) -> Start:
            return lambda timeout=None: self.client.allreduce_async(
                names[i], round, rank, data, op, size=size, out=into, timeout=timeout
            )

        starts = [starter(i, src[lo:hi], flat[lo:hi]) for i, (lo, hi) in enumerate(bounds)]
        for i, (lo, hi) in enumerate(bounds):
            self._begin(names[i], starter(i, src[lo:hi], None))  # (the call is in flight: its input stays put)
        pending = [self._try(names[i], start, deadline) for i, start in enumerate(starts)]
        for i, start in enumerate(starts):
            self._finish(names[i], start, pending[i], deadline)
        for i, (lo, hi) in enumerate(bounds):
            self._end(names[i], starter(i, src[lo:hi].copy(), None))  # (the caller may reuse its buffers now)
        self.calls["allreduce"] = self.calls.get("allreduce", 0) + 1

    def window(self, name: str) -> Any:
        """A segment of a relay-hosted MPI window (``refs.WindowRef``; ``api/win_relay.py`` uses it).

        Unlike the collectives, window calls are not replayed after a node restart (a put is not
        idempotent): a window whose node restarted fails its next call."""
        return self.client.window(name)

    def close(self) -> None:
        if self._hangups is not None:
            self._hangups.close()
        self.client.close()
