"""Hang diagnosis: ``FMPI_TIMEOUT`` turns a deadlock into an error that says who waits for whom.

With ``FMPI_TIMEOUT=S`` set, a blocking operation that has not completed
after S seconds fails with ``ERR_TIMEOUT``. Before it does, the rank asks
every other rank, through the relay (no links need to exist), to print what
it is doing right now: each one's progress thread answers even while its
program is blocked. The launcher shows all those lines, tagged by rank:

    fmpi: rank 0: FMPI_TIMEOUT: waited 30 s in a receive from rank 1 (tag 7) on COMM_WORLD
    fmpi: rank 1 (asked by rank 0): waiting 28.1 s in a collective on COMM_WORLD (waiting for rank 2)
    fmpi: rank 2 (asked by rank 0): not in a blocking MPI call (computing, or finished)

which is what a monitored barrier tells: which ranks wait in which operation
on which communicator, and which never arrived.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Iterable

from .matching import ANY_SOURCE, ANY_TAG
from .requests import Op, RecvOp, SendOp

# A context's label, asked for only when a hang is described (names may change).
Label = Callable[[], str]

# How long a rank that timed out gives the others to print their state before it fails.
ANSWER_GRACE = 0.5


class WaitRegistry:
    """What each thread of this rank is blocked on, since when."""

    def __init__(self) -> None:
        # thread -> (its pending ops, or what it waits in outside the engine; since when)
        self._waits: dict[int, tuple[tuple[Op, ...] | str, float]] = {}
        self.labels: dict[int, Label] = {}

    def enter(self, ops: Iterable[Op]) -> int:
        ident = threading.get_ident()
        self._waits[ident] = (tuple(ops), time.monotonic())
        return ident

    def enter_elsewhere(self, what: str) -> int:
        """A wait outside the engine (a server-side collective), described as `what`."""
        ident = threading.get_ident()
        self._waits[ident] = (what, time.monotonic())
        return ident

    def leave(self, ident: int) -> None:
        self._waits.pop(ident, None)

    def describe(self) -> list[str]:
        """One line per blocked thread: the operation, for how long, and on whom it waits."""
        now = time.monotonic()
        lines = []
        for ops, since in list(self._waits.values()):
            if isinstance(ops, str):
                lines.append(f"waiting {now - since:.1f} s in {ops}")
                continue
            pending = [op for op in ops if not op.done]
            what = "; ".join(self.describe_op(op) for op in pending) or "an operation that just completed"
            lines.append(f"waiting {now - since:.1f} s in {what}")
        return lines

    def describe_op(self, op: Op) -> str:
        if isinstance(op, RecvOp):
            place, collective = self._place(op.context)
            if collective:
                return f"a collective on {place} (waiting for rank {op.source})"
            source = "any rank" if op.source == ANY_SOURCE else f"rank {op.source}"
            tag = "any tag" if op.tag == ANY_TAG else f"tag {op.tag}"
            return f"a receive from {source} ({tag}) on {place}"
        if isinstance(op, SendOp):
            if op.announced:
                return (
                    f"a send of {op.nbytes} bytes to rank {op.dest}, announced and waiting for rank {op.dest} to post "
                    f"a matching receive (above FMPI_EAGER_LIMIT or past FMPI_UNEXPECTED_MAX, a message moves only "
                    f"then; two ranks that both send such messages before they receive wait for each other, as "
                    f"under MPICH: post the receive first, or use Sendrecv or Isend)"
                )
            why = "to match it" if op.sync else "to take it"
            return f"a send of {op.nbytes} bytes to rank {op.dest} (waiting for rank {op.dest} {why})"
        return "a non-blocking collective running in the background"

    def place(self, context: int) -> str:
        """The communicator a (collective) context belongs to, for messages."""
        return self._place(context)[0]

    def _place(self, context: int) -> tuple[str, bool]:
        label = self.labels.get(context)
        if label is not None:
            return label(), False
        label = self.labels.get(context - 1)  # collectives use their communicator's context + 1
        if label is not None:
            return label(), True
        return f"context {context:#x}", False


def report(rank: int, lines: list[str], asker: int | None = None) -> None:
    who = f"rank {rank}" if asker is None else f"rank {rank} (asked by rank {asker})"
    text = "; ".join(lines) if lines else "not in a blocking MPI call (computing, or finished)"
    print(f"fmpi: {who}: {text}", file=sys.stderr, flush=True)
