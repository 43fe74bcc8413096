"""Transport-level operation handles. The API layer wraps these in ``MPI.Request``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..wire.rank_frames import Kind

if TYPE_CHECKING:
    from .links.shm_lane import LaneReader


class TransportError(Exception):
    """An operation cannot complete: a peer died, finalized, or the job aborted.

    ``cause`` says what this error is a consequence of, when it is one:
    ``{"lost": R}`` (world rank R died) or ``{"aborted": True}`` (the job was
    aborted elsewhere). A rank that fails on such an error says so in its
    abort, and the launcher names the cause, not the rank that noticed it.
    """

    def __init__(self, message: str, error_class: str = "ERR_OTHER", cause: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.cause = cause if cause is not None or error_class != "ERR_ABORTED" else {"aborted": True}


def peer_died(rank: int, message: str) -> TransportError:
    """The error of every operation that needed world rank `rank`, which died."""
    return TransportError(message, "ERR_PEER_DIED", {"lost": rank})


def peer_finalized(rank: int) -> TransportError:
    """The error of every operation that needed world rank `rank`, which finalized (or exited after finalizing)."""
    return TransportError(f"rank {rank} has finalized; it sends nothing more", "ERR_PEER_FINALIZED", {"finalized": rank})


class Op:
    """Base of a pending send or receive. Completion is guarded by the engine's condition.

    The subclasses set these three fields themselves rather than call ``super().__init__()``: two ops
    are made per message round trip, and the call is ~1 % of it (benchmarks/before_after.py).
    """

    __slots__ = ("done", "error", "cancelled")

    def __init__(self) -> None:
        self.done = False
        self.error: TransportError | None = None
        self.cancelled = False


class SendOp(Op):
    """A send. Once its peer's stream takes it (``stream.py``), it is also the stream's record of the
    frame that carries it until the peer acknowledges it: the sequence number, the header's fields and
    the payload (or its private copy) a resend after a failover needs. One object per message, not two.
    """

    __slots__ = (
        "dest", "seq", "sync", "nbytes", "kind", "flags", "tag", "context", "parts", "on_write", "copied", "announced",
    )

    def __init__(self, dest: int, nbytes: int, sync: bool) -> None:
        self.done = False
        self.error = None
        self.cancelled = False
        self.dest = dest
        self.nbytes = nbytes
        self.sync = sync
        self.announced = False  # announced (rendezvous) and waiting for the peer's receive (``Stream.push_data``)
        self.seq = -1
        self.kind: Kind = Kind.DATA  # a message (``control`` makes the others)
        # The frame's other fields are set by the stream when it takes the send (``Stream.push_data``;
        # only what it took is ever read as a frame): flags, tag, context, parts (the payload, or the
        # stream's own copy of it), on_write (it completes once its frame is written, else on ACK or
        # MATCHED), copied (bytes of `parts` that are that copy).

    @classmethod
    def control(cls, dest: int, kind: Kind) -> "SendOp":
        """A sequenced frame without payload (MATCHED, BYE): nobody waits for it, so it starts complete."""
        op = cls(dest, 0, False)
        op.done = True
        op.kind = kind
        return op


class RecvOp(Op):
    """A posted receive. `source`/`tag` are the pattern; `status_*` what matched."""

    __slots__ = ("context", "source", "tag", "buffer", "payload", "status_source", "status_tag", "nbytes", "order")

    def __init__(self, context: int, source: int, tag: int, buffer: memoryview | None) -> None:
        self.done = False
        self.error = None
        self.cancelled = False
        self.context = context
        self.source = source
        self.tag = tag
        self.buffer = buffer  # destination bytes, or None: the engine allocates `payload`
        self.payload: memoryview | bytearray | None = None
        self.status_source = -1
        self.status_tag = -1
        self.nbytes = 0
        self.order = 0  # position among posted receives (set by the matcher)


class Arrived:
    """A message that arrived before anyone asked for it (the unexpected queue), or only its announcement."""

    __slots__ = ("context", "source", "tag", "payload", "nbytes", "sync", "lane", "lane_token", "cost", "announced")

    def __init__(
        self, context: int, source: int, tag: int, payload: bytearray | memoryview | None, sync: "int | SendOp | None",
        lane: LaneReader | None = None, lane_token: int = 0, cost: int = 0, announced: int = -1, nbytes: int = 0,
    ) -> None:
        self.context = context
        self.source = source
        self.tag = tag
        # None for an announcement (RTS): the payload moves once a receive matches it.
        self.payload = payload
        self.nbytes = len(payload) if payload is not None else nbytes
        # What taking it gives back to the sender's credit (``flow.Credit.consume``; 0: nothing, as for a self-send).
        self.cost = cost
        # The announcement's seq (the CTS names it), or -1 for a message that is here whole.
        self.announced = announced
        # The sender waits until this is matched: the seq to ACK to a remote
        # sender, or the SendOp itself for a synchronous send to self.
        self.sync = sync
        # The payload is still in this shared-memory lane (see LaneReader.hold), or None.
        self.lane = lane
        self.lane_token = lane_token
