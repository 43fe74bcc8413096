"""The only thing collective algorithms see: point-to-point within one collective call.

A ``Channel`` numbers ranks 0..size-1 as the communicator does, sends in the
communicator's collective context, and stamps every message with the call's
own tag, so concurrent (non-blocking) collectives on one communicator never
match each other's messages. Algorithms never import ``socket``.

Within one call, messages between two ranks match in the order they were
sent (the transport never reorders one link, and matching is first-come), so
an algorithm may send several messages to the same peer under the one tag as
long as the receiver posts its receives in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from ..transport.engine import Engine
from ..transport.requests import Op, RecvOp, TransportError

#: A channel's tag: blocking collective calls of a communicator cycle through [0, 2**TAG_BITS),
#: non-blocking ones through the next 2**TAG_BITS (api/intracomm.py numbers them; server_side.py splits them).
TAG_BITS = 29


def as_bytes(arr: np.ndarray) -> memoryview:
    """The bytes of a 1-D contiguous array (a view: what the transport sends from and fills)."""
    try:
        return memoryview(arr).cast("B")  # (half the time of a uint8 view: it runs per message)
    except (TypeError, ValueError):  # dtypes the buffer protocol cannot describe (datetime64, ...)
        return memoryview(arr.view(np.uint8))


class Channel:
    __slots__ = ("_context", "_engine", "_group", "rank", "server", "server_key", "size", "tag")

    def __init__(
        self, engine: Engine, group: Sequence[int], rank: int, context: int, tag: int,
        server: Any = None, server_key: str = "",
    ) -> None:
        self._engine = engine
        # A relay that runs collectives itself (collectives/server_side.py), when the job is relayed;
        # `server_key` names this communicator's objects there. None: point-to-point only.
        self.server = server
        self.server_key = server_key
        self._group = group
        self._context = context
        self.rank = rank
        self.size = len(group)
        self.tag = tag

    def isend(self, dest: int, *parts: memoryview) -> Op:
        return self._engine.isend(self._group[dest], self._context, self.tag, list(parts))

    def irecv(self, source: int, buf: memoryview | None = None) -> RecvOp:
        """Receive from `source` into `buf`, or into a new bytearray (``op.payload``) when None."""
        return self._engine.irecv(self._group[source], self._context, self.tag, buf)

    def send(self, dest: int, *parts: memoryview) -> None:
        self._engine.wait(self.isend(dest, *parts))

    def recv(self, source: int, buf: memoryview | None = None) -> RecvOp:
        op = self.irecv(source, buf)
        self._engine.wait(op)
        return op

    def sendrecv(self, dest: int, parts: list[memoryview], source: int, buf: memoryview | None = None) -> RecvOp:
        """Send `parts` (one message) to `dest` and receive from `source` at once; returns the completed receive.

        The transport may keep the list `parts` until the send completes: do not change it meanwhile.
        """
        group = self._group
        return self._engine.sendrecv(group[dest], group[source], self._context, self.tag, parts, buf)

    def wait(self, op: Op) -> None:
        self._engine.wait(op)

    # Around a blocking call of `server` (server_side.py): FMPI_TIMEOUT and hang diagnosis cover it too.
    def server_wait(self, what: str) -> AbstractContextManager[float | None]:
        """Yields the call's deadline (None: no FMPI_TIMEOUT); the rank reports waiting in `what` meanwhile."""
        return self._engine.blocked_elsewhere(self._on_comm(what))

    def server_timed_out(self, what: str) -> TransportError:
        """The deadline of ``server_wait`` passed: every rank prints its state; the error to raise."""
        return self._engine.timed_out_elsewhere(self._on_comm(what))

    def _on_comm(self, what: str) -> str:
        return f"{what} on {self._engine.waits.place(self._context)}"

    def waitall(self, ops: Sequence[Op]) -> None:
        self._engine.wait_all(ops)

    def waitany(self, ops: Sequence[Op]) -> int:
        """Index of a completed op in `ops` (raises that op's error)."""
        i = self._engine.wait_any(ops)
        if ops[i].error is not None:
            raise ops[i].error
        return i

    # For algorithms over the machines' structure (*_hierarchical.py)
    def world_rank(self, rank: int) -> int:
        """The job-wide rank of this channel's `rank`: which machine it runs on follows from it."""
        return self._group[rank]

    def subset(self, ranks: Sequence[int]) -> Channel:
        """A channel over some of this one's ranks (this rank among them), in the same context and tag: for a
        step of an algorithm in which only they talk to each other, so its messages cannot meet the others'."""
        return Channel(self._engine, [self._group[r] for r in ranks], list(ranks).index(self.rank), self._context,
                       self.tag, self.server, self.server_key)
