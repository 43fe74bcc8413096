"""What the engine needs of the rank's line to the rendezvous service while the job runs (``RelayLine``).

After the world, every rank has one line to the service that brought the
job together. It carries the job's control (aborts, failures, lookups of
peers' records, link reports, output, heartbeats) and the pair streams that
go through the relay (FORWARD chunks, each naming the other rank). Two
implementations:

* ``relay_channel.RelayChannel``: a socket speaking the fmpi-relay byte
  protocol (fmpi-relay itself, and the in-process store of tests);
* ``rendezvous.redis_line.RedisLine``: Redis lists, spoken directly by two
  threads (no byte protocol in between).

The progress loop watches ``sock``: READ means ``on_readable`` has
something to hand to the events bound with ``bind`` (always on the progress
thread); WRITE is wanted after a write returned False, and ``flush`` then
writes what was queued.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable, Protocol

from ..wire.relay_protocol import Kind

# A chunk of `rank`'s relayed stream (a view valid during the call only).
OnForward = Callable[[int, memoryview], None]
# A control message from the service (ABORT, ERROR, PEERS, UNDELIVERABLE, PEER_LOST, PEER_BACK, HEARTBEAT).
OnControl = Callable[[Kind, dict[str, Any]], None]


class RelayLine(Protocol):
    sock: socket.socket  # what the progress loop watches (READ: events to dispatch; WRITE: room to flush)
    wlock: threading.Lock  # held by writers of a frame, so a relayed pair's frames keep their order
    bytes_in: int
    bytes_out: int
    last_heard: float  # monotonic time the service last said anything
    beats_heard: bool  # the service answers heartbeats (so its silence means trouble)
    lost: bool

    def bind(self, on_forward: OnForward, on_control: OnControl) -> None:
        """Where incoming chunks and control messages go (called before the loop watches ``sock``)."""
        ...

    def on_readable(self) -> None:
        """Progress thread: dispatch what arrived; raises ``RelayLost`` or ``ProtocolError`` when the line broke."""
        ...

    def forward(self, dest: int, parts: list[memoryview], token: object | None) -> bool:
        """One fmpi frame to rank `dest` through the relay. True: the line owns it now (the parts stay
        untouched until acknowledged: they are the stream's); False: part of it is queued, and `token` comes
        back from ``flush`` once it is out."""
        ...

    def forward_held(self, dest: int, parts: list[memoryview], token: object | None) -> bool:
        """``forward`` for a caller that already holds ``wlock``."""
        ...

    def send_control(self, kind: Kind, body: dict[str, Any] | None = None) -> bool:
        """A control message (HEARTBEAT, LOOKUP, LINK, OUTPUT, FINISHED, ABORT, RESYNCED); False: queued."""
        ...

    def flush(self) -> tuple[list[object], bool]:
        """Progress thread, on WRITE: (tokens of frames now out, nothing left queued)."""
        ...

    def has_queued(self) -> bool: ...

    def drain(self, timeout: float) -> bool:
        """Block until everything written so far reached the service (no progress thread needed)."""
        ...

    def close_gracefully(self, timeout: float = 2.0) -> None:
        """After the last message: deliver what is queued, then close."""
        ...


class RelayRoute:
    """The relay as the carrier of one pair's stream (what ``Stream.attach`` takes)."""

    __slots__ = ("channel", "dest")
    kind = "relayed"

    def __init__(self, channel: RelayLine, dest: int) -> None:
        self.channel = channel
        self.dest = dest

    @property
    def wlock(self):
        return self.channel.wlock

    def write(self, parts: list[memoryview], token: object | None) -> bool:
        return self.channel.forward(self.dest, parts, token)

    def write_held(self, parts: list[memoryview], token: object | None) -> bool:
        return self.channel.forward_held(self.dest, parts, token)
