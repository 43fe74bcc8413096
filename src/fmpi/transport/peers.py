"""Per-peer state of the engine: the link's life cycle, its stream, and what is known about its set-up.

    NONE ──(first send, a PUNCH request, an incoming connection)──> SETUP
    SETUP ──(a handshake accepted)──> LINKED (direct or punched TCP)
    SETUP ──(every TCP step failed, or the peer said RESUME)──> RELAYED
    LINKED ──(the connection died without BYE, or the peer said RESUME)──> RELAYED (failover)
    any ──(the peer finalized and closed, died, or cannot be reached)──> GONE

Every field is guarded by the engine's lock, except the stream (own lock).
"""

from __future__ import annotations

import enum

from .links.link import Link
from .requests import RecvOp, TransportError
from .stream import Stream


class PeerState(enum.Enum):
    NONE = "no link"
    SETUP = "setting up"
    LINKED = "linked"
    RELAYED = "relayed"
    GONE = "gone"


class Peer:
    __slots__ = (
        "rank",
        "state",
        "stream",
        "link",
        "error",
        "heard_bye",
        "lost",
        "awaiting",
        # set-up
        "steps",
        "planned",
        "running",
        "handshakes_out",
        "accepting",
        "tie_wait_until",
        "punch_wanted",
        "lookup",
        "errors",
        "setup_started",
        "awaiting_resume",
        # statistics
        "kind",
        "why",
        "setup_seconds",
        "failovers",
    )

    def __init__(self, rank: int, stream: Stream) -> None:
        self.rank = rank
        self.state = PeerState.NONE
        self.stream = stream
        self.link: Link | None = None  # the TCP link (after GONE: the last one, closed, for its counters)
        self.error: TransportError | None = None
        self.heard_bye = False
        self.lost: TransportError | None = None  # the relay says it left; its link's EOF will end it
        # Receives matched to its announcements (RTS), waiting for their payloads, by the RTS's seq.
        self.awaiting: dict[int, RecvOp] = {}
        self.steps: list[str] = []  # set-up steps still to try ("direct", "punch", "relay")
        self.planned = False  # whether this side's own plan was loaded (else only answering the peer)
        self.running: str | None = None  # the step in progress
        self.handshakes_out = 0  # handshakes where this side sent HELLO and awaits the verdict
        self.accepting = False  # this side answered a HELLO with ACCEPT and awaits CONFIRM
        self.tie_wait_until = 0.0  # the peer said its own connection wins: wait for it until then
        self.punch_wanted = False  # the peer asked us to punch while another step ran
        self.lookup = ""  # "active" / "passive": the set-up waits for the peer's record (links/directory.py)
        self.errors: list[str] = []
        self.setup_started: float | None = None
        self.awaiting_resume = False  # we said RESUME through the relay and wait for the peer's
        self.kind: str | None = None  # "direct", "punched" or "relayed", once up
        self.why = ""  # why a pair is relayed (for fmpirun -v)
        self.setup_seconds: float | None = None
        self.failovers = 0

    def stats(self) -> dict:
        return {
            "peer": self.rank,
            "kind": self.kind,
            "seconds": None if self.setup_seconds is None else round(self.setup_seconds, 6),
            "failovers": self.failovers,
            # large payloads went through shared memory (shm_lane.py): the peer is on this host
            # (after a failover the pair is relayed: no more lanes)
            "shared_memory": self.kind != "relayed" and self.link is not None and self.link.lane_out is not None,
            **({"why": self.why} if self.kind == "relayed" and self.why else {}),
        }
