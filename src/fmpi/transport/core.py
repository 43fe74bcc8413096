"""The state every part of the engine shares, and how a completion wakes the threads that wait for it.

The engine (``engine.py``) is a facade over parts that each own their own
fields: sending, receiving, waiting, the held-link fast paths, carriers and
relay events, link set-up. What they all need is here, in two small objects:

* ``Core``: the engine's lock, the peers, the matcher, receives matched to
  frames still arriving (``inflight``), the fatal error, the progress loop,
  the set-up pool, the relay connection and its handler, the finalize
  flags, and completing an operation;
* ``Wakeup``: who sleeps on the engine's condition, and the one thread that
  may be reading links while it waits (``waiting.py``), with its bell.

Locking: ``Core.lock`` guards peers, the matcher and op completion (and is
the lock of ``Wakeup.cond``, which waiters sleep on). Lock order: a stream's
``rx_lock`` (held by whoever reads that pair's carrier), then ``Core.lock``,
then the stream's lock, then a carrier's write lock; each may also be taken
alone.
"""

from __future__ import annotations

import os
import threading
import time
from _thread import get_ident
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from ..wire.relay_protocol import Kind as RelayKind
from .links.link import Link
from .matching import Matcher
from .options import TransportOptions
from .peers import Peer, PeerState
from .progress import ProgressLoop
from .relay_line import RelayLine
from .requests import Arrived, Op, RecvOp, TransportError
from .stream import Stream


class RelayHandler(Protocol):
    """Who hears about relay events the transport does not handle itself (the rank's session)."""

    def relay_control(self, kind: RelayKind, body: dict[str, Any]) -> None: ...
    def relay_lost(self, error: Exception) -> None: ...
    def link_event(self, info: dict[str, Any]) -> None: ...


class Wakeup:
    """Waking waiters: those asleep on the condition, and the thread reading links (its eventfd bell)."""

    def __init__(self, lock: threading.Lock) -> None:
        self.cond = threading.Condition(lock)
        self.sleepers = 0  # threads on cond (notify_all costs microseconds: skip it when none)
        self.reader: int | None = None  # the thread reading links while it waits
        self.reading: tuple[Link, ...] = ()  # ... the links it reads
        self.woken = False  # ... and whether it was rung since it last looked
        self.bell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def notify_locked(self) -> None:
        """Wake every waiter (lock held); a thread that reads for itself is not rung by its own completions."""
        if self.sleepers:
            self.cond.notify_all()
        reader = self.reader
        if reader is not None and not self.woken and reader != get_ident():
            self.woken = True
            os.eventfd_write(self.bell, 1)

    def sleep(self, deadline: float | None, what: str, remaining: float | None = None) -> None:
        """Wait on the condition (lock held; the caller checked its condition under this same hold)."""
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransportError(f"{what} timed out", "ERR_TIMEOUT")
        self.sleepers += 1
        try:
            self.cond.wait(remaining)
        finally:
            self.sleepers -= 1

    def claim(self, links: tuple[Link, ...]) -> None:
        """(lock held) The calling thread reads `links` from now on."""
        self.reader = get_ident()
        self.reading = links
        self.woken = False

    def release(self) -> None:
        """(lock held) The reading thread stops reading; a ring meant for it is drained here, so that the
        next reader's rings are its own."""
        if self.woken:
            try:
                os.eventfd_read(self.bell)
            except BlockingIOError:
                pass
        self.reader = None
        self.reading = ()

    def close(self) -> None:
        """(lock held) The loop stopped: close the bell unless a reader still polls it (it dies with the process)."""
        if self.reader is None and self.bell >= 0:
            os.close(self.bell)
            self.bell = -1


class Core:
    """What the engine's parts share (see the module docstring)."""

    def __init__(self, rank: int, size: int, options: TransportOptions, name: str) -> None:
        self.rank = rank
        self.size = size
        self.options = options
        self.lock = threading.Lock()
        self.wake = Wakeup(self.lock)
        self.matcher: Matcher[RecvOp, Arrived] = Matcher()
        self.peers: dict[int, Peer] = {}
        # A receive matched to a frame still arriving, with the frame's destination, per source rank.
        self.inflight: dict[int, tuple[RecvOp | None, memoryview | bytearray]] = {}
        self.fatal: TransportError | None = None
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix=f"fmpi-link-{rank}")
        self.loop = ProgressLoop(name)
        self.relay: RelayLine | None = None
        self.handler: RelayHandler | None = None  # (set with the relay)
        self.old_links: list[Link] = []  # links replaced by the relay (for traffic counts)
        self.draining = False  # finalize waits for acknowledgements
        self.closing = False  # finalize has said BYE: a link closing now is no failover
        self.inboxes: dict[int, Any] = {}  # context -> the Inbox its messages go to, served where read (inbox.py)

    def peer(self, rank: int) -> Peer:
        """The record of world rank `rank`, made on first use (lock held)."""
        peer = self.peers.get(rank)
        if peer is None:
            if not 0 <= rank < self.size:
                raise TransportError(f"invalid rank {rank} (job has {self.size} ranks)", "ERR_RANK")
            o = self.options
            stream = Stream(
                self.rank, rank, copy_limit=o.copy_limit, ack_window=o.ack_window, ack_every=o.ack_every,
                ack_bytes=o.ack_bytes, eager_limit=o.eager_limit, credit=o.unexpected_max // max(1, self.size - 1),
            )
            peer = self.peers[rank] = Peer(rank, stream)
        return peer

    def check_fatal(self) -> None:
        if self.fatal is not None:
            raise self.fatal

    def complete_locked(self, op: Op) -> None:
        op.done = True
        self.wake.notify_locked()

    def complete(self, op: Op) -> None:
        with self.lock:
            self.complete_locked(op)

    def fill(self, recv: RecvOp, source: int, tag: int, payload: bytearray | memoryview) -> None:
        """Complete `recv` from a whole payload (lock held)."""
        n = len(payload)
        if recv.buffer is None:
            recv.payload = payload
        elif n <= len(recv.buffer):
            recv.buffer[:n] = payload
        else:
            recv.error = truncated(recv, source, tag, n)
        self.finish_recv(recv, source, tag, n)

    def finish_recv(self, recv: RecvOp, source: int, tag: int, nbytes: int) -> None:
        """`recv` holds its message (lock held): record what matched and wake its waiter."""
        recv.status_source = source
        recv.status_tag = tag
        recv.nbytes = nbytes
        recv.done = True
        self.wake.notify_locked()

    def take_arrived(self, recv: RecvOp, msg: Arrived) -> int:
        """Complete `recv` from a message of the unexpected queue (lock held), or, for an announcement,
        have it wait for the payload (the caller sends the CTS: ``Sender.took``). Returns the CREDIT due
        to the sender now (``flow.Credit.consume``; 0: none)."""
        if msg.announced >= 0:
            peer = self.peers[msg.source]
            if peer.error is not None:  # it failed after announcing: its payload will never come
                recv.error = peer.error
                self.complete_locked(recv)
            else:
                peer.awaiting[msg.announced] = recv
            return 0
        credit = self.peers[msg.source].stream.credit.consume(msg.cost) if msg.cost else 0
        lane = msg.lane
        if lane is None:
            self.fill(recv, msg.source, msg.tag, msg.payload)  # type: ignore[arg-type]
            return credit
        # Still in a shared-memory lane: copy it out once, then free its bytes in the ring.
        payload = msg.payload
        self.fill(recv, msg.source, msg.tag, payload if recv.buffer is not None else bytearray(payload))
        msg.lane = None
        lane.drop(msg.lane_token)
        payload.release()  # type: ignore[union-attr]
        return credit

    def deliver_payload(
        self, rank: int, rts_seq: int, tag: int, nbytes: int, payload: memoryview | bytearray | None
    ) -> RecvOp | None:
        """(lock held) The payload of an announced message arrived: complete the receive that waits for it
        (``Peer.awaiting``). `payload`: the bytes, or None when they were read straight into its buffer (or
        discarded, when they did not fit it). Returns the receive it completed."""
        recv = self.peers[rank].awaiting.pop(rts_seq, None)
        if recv is None:
            return None  # (its peer failed meanwhile: the receive has its error)
        if payload is not None:
            self.fill(recv, rank, tag, payload if recv.buffer is not None else bytearray(payload))
        else:
            if recv.buffer is not None and nbytes > len(recv.buffer):
                recv.error = truncated(recv, rank, tag, nbytes)
            self.finish_recv(recv, rank, tag, nbytes)
        return recv

    def payload_destination(self, rank: int, rts_seq: int, nbytes: int) -> memoryview | bytearray | None:
        """(lock held) Where the payload of an announced message goes: its receive's buffer, a buffer made
        now for a receive without one, or None (discard: it does not fit, or nobody waits for it)."""
        recv = self.peers[rank].awaiting.get(rts_seq)
        if recv is None:
            return None
        if recv.buffer is None:
            recv.payload = bytearray(nbytes)
            return recv.payload
        return recv.buffer[:nbytes] if nbytes <= len(recv.buffer) else None

    def links(self) -> list[Link]:
        """(lock held) Every TCP link, current or replaced by the relay."""
        return [p.link for p in self.peers.values() if p.link is not None] + self.old_links

    def traffic(self) -> dict[str, int]:
        """Bytes sent and received over TCP links and the relay connection (and over the relay alone), so far."""
        with self.lock:
            links = self.links()
        sent = sum(link.bytes_out for link in links)
        received = sum(link.bytes_in for link in links)
        relay = self.relay
        relay_sent = relay.bytes_out if relay is not None else 0
        relay_received = relay.bytes_in if relay is not None else 0
        # (the relay's share apart: a relay host bills its data transfer, links between functions do not)
        return {"sent": sent + relay_sent, "received": received + relay_received,
                "relay_sent": relay_sent, "relay_received": relay_received}

    def link_stats(self) -> list[dict[str, Any]]:
        """One entry per peer a link was made to: kind, set-up seconds, failovers."""
        with self.lock:
            return [p.stats() for p in sorted(self.peers.values(), key=lambda p: p.rank) if p.kind is not None]

    def link_summary(self) -> dict[str, int]:
        """How many peers are in each link state."""
        with self.lock:
            states = [p.state for p in self.peers.values()]
        return {s.name.lower(): states.count(s) for s in PeerState if states.count(s)}


def truncated(recv: RecvOp, source: int, tag: int, nbytes: int) -> TransportError:
    """The error of a receive whose buffer is too small for the message that matched it."""
    size = 0 if recv.buffer is None else len(recv.buffer)
    return TransportError(
        f"message truncated: {nbytes} bytes from rank {source} (tag {tag}) do not fit a {size}-byte buffer",
        "ERR_TRUNCATE",
    )
