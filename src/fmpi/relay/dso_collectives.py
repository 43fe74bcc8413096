"""Server-side collectives of fmpi communicators on the DSO relay nodes (a ``collectives/server_side.Provider``)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .dso_client import DsoClient
from .client import RelayError
from .dso_connection import Pending, SharedObjectTimeout


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

    The client connects on first use: creating this costs nothing.
    """

    kind = "dso"
    errors = (RelayError, OSError)  # (what collectives/server_side turns into MPI errors)

    def __init__(self, relays: str | Sequence[str], job: str, token: str, *, piece: int = 4 << 20, timeout: float = 30.0) -> None:
        self.client = DsoClient(relays, job, token, timeout=timeout)
        self.where = ",".join(f"{self.client.scheme}://{h}:{p}" for h, p in self.client.addresses)
        self.piece = piece
        self.calls: dict[str, int] = {}

    def _patiently(self, start: Callable[[], Pending]) -> Any:
        while True:
            try:
                return start().result()
            except SharedObjectTimeout:
                continue  # the server gave up waiting, not the job: arrive again (idempotent)

    def barrier(self, comm_key: str, generation: int, rank: int, size: int) -> None:
        self._patiently(lambda: self.client.barrier_async(f"fmpi.b.{comm_key}", generation, rank, size=size))
        self.calls["barrier"] = self.calls.get("barrier", 0) + 1

    def allreduce(self, comm_key: str, round: int, rank: int, size: int, send: np.ndarray, op: str, out: np.ndarray) -> None:
        src = np.ascontiguousarray(send).reshape(-1)
        if src is out.reshape(-1) or np.shares_memory(src, out):
            src = src.copy()  # in place: the first piece's result must not overwrite later pieces' input
        flat = out.reshape(-1)  # a view: the callers pass flat, contiguous buffers
        step = max(1, self.piece // max(1, src.itemsize))
        bounds = [(lo, min(lo + step, src.size)) for lo in range(0, src.size, step)]

        def start(i: int, lo: int, hi: int) -> Pending:
            return self.client.allreduce_async(
                f"fmpi.r.{comm_key}.{i}", round, rank, src[lo:hi], op, size=size, out=flat[lo:hi]
            )

        pending = [start(i, lo, hi) for i, (lo, hi) in enumerate(bounds)]
        for i, (lo, hi) in enumerate(bounds):
            try:
                pending[i].result()
            except SharedObjectTimeout:
                self._patiently(lambda i=i, lo=lo, hi=hi: start(i, lo, hi))
        self.calls["allreduce"] = self.calls.get("allreduce", 0) + 1

    def close(self) -> None:
        self.client.close()
