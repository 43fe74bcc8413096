"""The progress engine: point-to-point messages between the ranks of one job.

One daemon thread per rank (``progress.ProgressLoop``) sleeps in epoll on
every link, the listening socket, the relay connection and a wake-up pipe;
it never polls, so an idle rank costs no CPU. Sends are written directly by
the calling thread while the carrier's queue is empty; only what the kernel
cannot take right away is handed to the progress thread.

A thread that blocks for a message reads the link itself rather than
waiting for the progress thread to hand the message over (``waiting.py``).

Each peer has one reliable, ordered stream of frames (``stream.Stream``:
sequence numbers, cumulative ACKs, resending) over one *carrier* at a time:

* a TCP link made by plain connect (``direct``) or by hole punching
  (``punched``), set up lazily on the first message (``linkup.Linker``);
* the relay (``relayed``): fmpi frames cut into FORWARD chunks
  (``relay_channel``), when punching is impossible or failed.

A TCP link that dies without the peer's BYE (reset, or silent for
``link_timeout``) *fails over*: both ends detach it, say RESUME through the
relay with the next sequence number they expect, and resend from there on
the relay. No message is lost, duplicated or reordered, and the program sees
nothing. With no relay (engines wired by hand, as in tests), a dead link
fails the peer as before.

Locking: ``_lock`` guards peers, the matcher and op completion (and is the
lock of ``_cond``, which waiters sleep on). Lock order: a stream's ``rx_lock``
(held by whoever reads that pair's carrier), then ``_lock``, then the stream's
lock, then a carrier's write lock; each may also be taken alone.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Sequence

from ..wire.rank_frames import Kind
from .assembler import FrameAssembler
from .carriers import CarrierMixin, RelayHandler  # noqa: F401 - RelayHandler is part of the API
from .held_link import HeldLinkMixin
from .link import Link
from .linkup import Linker
from .matching import ANY_SOURCE, Matcher
from .options import TransportOptions
from .peers import LINKED, Peer, PeerState
from .progress import READ, ProgressLoop
from .receiving import ReceivingMixin
from .relay_channel import RelayChannel
from .requests import Arrived, Op, RecvOp, SendOp, TransportError
from .routes import Route
from .shm_lane import NO_KEY, host_key
from .stream import Carrier, Stream
from .waiting import WaitingMixin

Endpoint = tuple[str, int]



class Engine(CarrierMixin, ReceivingMixin, WaitingMixin, HeldLinkMixin):
    """Point-to-point message passing between the ranks of one job."""

    def __init__(
        self,
        rank: int,
        size: int,
        secret: bytes,
        endpoints: Callable[[int], Sequence[Endpoint]],
        listener: socket.socket | None,
        *,
        connect_timeout: float = 10.0,
        retry_after_tie: float = 2.0,
        options: TransportOptions | None = None,
        routes: dict[int, Route] | None = None,
        local_addr: Endpoint | None = None,
    ) -> None:
        self.rank = rank
        self.size = size
        self.options = options or TransportOptions(connect_timeout=connect_timeout, retry_after_tie=retry_after_tie)
        self._secret = secret
        # Sent in every handshake: peers with the same key get shared-memory lanes (shm_lane.py).
        self.host_key = host_key() if self.options.lane_capacity else NO_KEY
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._matcher: Matcher[RecvOp, Arrived] = Matcher()
        self._peers: dict[int, Peer] = {}
        self._inflight: dict[int, tuple[RecvOp | None, memoryview | bytearray]] = {}
        self._fatal: TransportError | None = None
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix=f"fmpi-link-{rank}")
        self._relay: RelayChannel | None = None
        self._relay_handler: RelayHandler | None = None
        self._relay_asm: dict[int, FrameAssembler] = {}
        self._touched: set[int] = set()  # peers whose relayed sequenced frames arrived in this read batch
        self._watched: set[socket.socket] = set()  # sockets the caller owns (never closed here)
        self._old_links: list[Link] = []  # links replaced by the relay (for traffic counts)
        self._draining = False  # finalize waits for acknowledgements
        self._closing = False  # finalize has said BYE: a link closing now is no failover
        self._init_waiting()
        self._linker = Linker(self, endpoints, routes, local_addr)
        self._loop = ProgressLoop(f"fmpi-progress-{rank}")
        self._loop.on_stop = self._on_loop_stop
        self._listener = listener
        if listener is not None:
            listener.setblocking(False)
            self._loop.call_soon(lambda: self._loop.register(listener, READ, self._on_acceptable))

    # ================================================================ public API
    def isend(self, dest: int, context: int, tag: int, parts: list[memoryview], sync: bool = False) -> SendOp:
        """Start sending `parts` (contiguous byte views, not copied) as one message."""
        nbytes = len(parts[0]) if len(parts) == 1 else sum(len(p) for p in parts)
        op = SendOp(dest, nbytes, sync)
        if dest == self.rank:
            self._deliver_to_self(op, context, tag, parts, nbytes)
            return op
        peer = self._peers.get(dest)
        if peer is None or peer.state is not LINKED or self._fatal is not None:
            # (a linked peer needs nothing here: if it fails meanwhile, its stream fails the op)
            with self._lock:
                self._check_fatal()
                peer = self._peer(dest)
                if peer.error is not None:
                    raise peer.error
                if peer.state is PeerState.NONE or (peer.state is PeerState.SETUP and not peer.planned):
                    self._linker.need(peer)
        self._push_message(peer, op, tag, context, parts)
        return op

    def irecv(self, source: int, context: int, tag: int, buffer: memoryview | None) -> RecvOp:
        """Post a receive into `buffer` (bytes view), or into a fresh bytearray when None."""
        op = RecvOp(context, source, tag, buffer)
        with self._lock:
            if self._fatal is not None:
                raise self._fatal
            peer = None if source == ANY_SOURCE or source == self.rank else self._peers.get(source) or self._peer(source)
            msg = self._matcher.take_or_post(op)
            if msg is None:
                if peer is not None and peer.error is not None:  # (nothing came from it before it failed)
                    self._matcher.unpost(op)
                    raise peer.error
                return op
            self._take_arrived(op, msg)
        self._matched_sync(msg.source, msg.sync)
        return op

    def sendrecv(
        self, dest: int, source: int, context: int, tag: int, parts: list[memoryview], buffer: memoryview | None
    ) -> RecvOp:
        """Send `parts` to `dest` and receive from `source` (into `buffer`; None: a new bytearray), both
        under `context` and `tag`; returns the completed receive.

        The exchange step of most collective algorithms. The receive is posted
        first, so the reply can land in `buffer` directly; a small send
        completes as it is written, and then the receive alone is waited for
        (on the held-link fast path, where it applies).
        """
        if dest == source and self.options.op_timeout is None:
            peer = self._peers.get(dest)
            link = peer.link if peer is not None else None
            if link is not None:
                recv = self._exchange_held(peer, link, context, tag, parts, buffer)  # (held_link.py)
                if recv is not None:
                    return recv
        recv = self.irecv(source, context, tag, buffer)
        send = self.isend(dest, context, tag, parts)
        if send.done:
            self.wait(recv)
            if send.error is not None:
                raise send.error
        else:
            self.wait_all((recv, send))
        return recv

    def iprobe(self, source: int, context: int, tag: int) -> tuple[int, int, int] | None:
        """(source, tag, nbytes) of the first matching arrived message, left in place."""
        pattern = RecvOp(context, source, tag, None)
        with self._lock:
            self._check_fatal()
            msg = self._matcher.find_unexpected(pattern)
            return None if msg is None else (msg.source, msg.tag, len(msg.payload))

    def probe(self, source: int, context: int, tag: int, timeout: float | None = None) -> tuple[int, int, int]:
        pattern = RecvOp(context, source, tag, None)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                self._check_fatal()
                msg = self._matcher.find_unexpected(pattern)
                if msg is not None:
                    return msg.source, msg.tag, len(msg.payload)
                if source != ANY_SOURCE and source != self.rank:
                    peer = self._peer(source)
                    if peer.error is not None:
                        raise peer.error
                self._sleep(deadline, "probe")

    def wait(self, op: Op, timeout: float | None = None) -> None:
        """Block until `op` completes; raises its error."""
        if not op.done:
            timeout = self._try_held(op, timeout)
            if not op.done:
                self._block(lambda: op.done, (op,), timeout, "wait")
        if op.error is not None:
            raise op.error

    def wait_any(self, ops: Sequence[Op], timeout: float | None = None) -> int:
        """Index of a completed op (the first in order); blocks until one completes."""
        while True:
            for i, op in enumerate(ops):
                if op.done:
                    return i
            self._block(lambda: any(op.done for op in ops), ops, timeout, "wait_any")

    def wait_all(self, ops: Iterable[Op], timeout: float | None = None) -> None:
        ops = list(ops)
        if not _all_done(ops):
            pending = [op for op in ops if not op.done]
            if len(pending) == 1:  # (a sendrecv whose send went out at once: a single receive)
                timeout = self._try_held(pending[0], timeout)
            if not _all_done(ops):
                self._block(lambda: _all_done(ops), ops, timeout, "wait_all")
        for op in ops:
            if op.error is not None:
                raise op.error

    def _try_held(self, op: Op, timeout: float | None) -> float | None:
        """Wait for a receive, or a send's acknowledgement, on its peer's held link (held_link.py) as far
        as that fast path goes; returns what is left of `timeout` for the general wait that takes over
        where it stops."""
        cls = op.__class__
        if cls is RecvOp:
            rank = op.source  # type: ignore[attr-defined]
        elif cls is SendOp:
            rank = op.dest  # type: ignore[attr-defined]
        else:
            return timeout
        if timeout is None and self.options.op_timeout is not None:
            return timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        self._wait_held(op, rank, deadline)  # type: ignore[arg-type]
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def cancel(self, op: Op) -> bool:
        """Cancel a receive that has not matched yet. Sends cannot be cancelled once started."""
        if not isinstance(op, RecvOp):
            return False
        with self._lock:
            if op.done or not self._matcher.unpost(op):
                return False
            op.cancelled = True
            self._complete_locked(op)
            return True

    def new_op(self) -> Op:
        """An op completed by code above the transport (e.g. a collective running in the background)."""
        return Op()

    def finish_op(self, op: Op, error: TransportError | None = None) -> None:
        """Complete an op from ``new_op``; waiters on it (wait, wait_any) wake up."""
        with self._lock:
            op.error = error
            self._complete_locked(op)

    def fail(self, error: TransportError) -> None:
        """Fail every pending and future operation (job aborted, relay lost, ...)."""
        with self._lock:
            if self._fatal is None:
                self._fatal = error
            self._notify_locked()

    def watch(self, sock: socket.socket, on_readable: Callable[[], None]) -> None:
        """Let the progress thread call `on_readable` when `sock` has data (the caller keeps owning `sock`)."""
        self._watched.add(sock)
        self._loop.call_soon(lambda: self._loop.register(sock, READ, lambda _mask: on_readable()))

    def unwatch(self, sock: socket.socket) -> None:
        self._loop.call_soon(lambda: self._loop.unregister(sock))

    def link_summary(self) -> dict[str, int]:
        with self._lock:
            states = [p.state for p in self._peers.values()]
        return {s.name.lower(): states.count(s) for s in PeerState if states.count(s)}

    def traffic(self) -> dict[str, int]:
        """Bytes this rank sent and received over TCP links and the relay connection, so far."""
        with self._lock:
            links = [p.link for p in self._peers.values() if p.link is not None] + self._old_links
        sent = sum(link.bytes_out for link in links)
        received = sum(link.bytes_in for link in links)
        if self._relay is not None:
            sent += self._relay.bytes_out
            received += self._relay.bytes_in
        return {"sent": sent, "received": received}

    def link_stats(self) -> list[dict[str, Any]]:
        """One entry per peer a link was made to: kind, set-up seconds, failovers."""
        with self._lock:
            return [p.stats() for p in sorted(self._peers.values(), key=lambda p: p.rank) if p.kind is not None]

    # ------------------------------------------------------------- finalizing
    def close(self, timeout: float = 30.0) -> None:
        """Finalize: deliver everything sent (until acknowledged), say BYE to every peer, stop."""
        if self._loop.stopped:
            return
        deadline = time.monotonic() + timeout
        with self._lock:
            self._draining = True  # from now on, acknowledgements wake this wait
            while self._fatal is None and not self._loop.stopped and self._busy():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    print(f"fmpi: rank {self.rank}: finalize gave up on unsent messages", file=sys.stderr)
                    break
                self._sleep(None, "finalize", min(remaining, 0.5))
            byes = [p for p in self._peers.values() if p.state in (PeerState.LINKED, PeerState.RELAYED)]
            self._closing = True
        if self._fatal is None:
            for peer in byes:
                self._after_write(peer.stream.push_control(Kind.BYE), [])
        # Let the BYEs out, then half-close: the peer reads BYE, then EOF.
        end = time.monotonic() + 0.5
        with self._lock:
            while any(p.link is not None and p.link.has_queued() for p in byes) and time.monotonic() < end:
                self._sleep(None, "finalize", 0.05)
            links = [p.link for p in byes if p.link is not None]
        for link in links:
            try:
                link.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        # Drain until every linked peer has closed its side too (bounded): closing
        # with unread bytes in the receive queue would make the kernel send RST.
        end = time.monotonic() + 0.5
        with self._lock:
            while any(p.state is PeerState.LINKED for p in self._peers.values()):
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                self._sleep(None, "finalize", remaining)
        self._stop_loop()

    def abandon(self) -> None:
        """Stop at once without saying goodbye (abort path)."""
        self._stop_loop()

    def _busy(self) -> bool:
        for p in self._peers.values():
            if p.state in (PeerState.SETUP, PeerState.LINKED, PeerState.RELAYED) and not p.heard_bye:
                if p.stream.pending():
                    return True
            if p.link is not None and p.link.has_queued():
                return True
        return self._relay is not None and self._relay.has_queued()

    # ============================================================ sending paths
    def _push_message(self, peer: Peer, op: SendOp, tag: int, context: int, parts: list[memoryview]) -> None:
        """Hand the message of `op` to `peer`'s stream (``isend``'s last steps, and ``_exchange_held``'s)."""
        queued, done = peer.stream.push_data(op, tag, context, parts)
        if queued is not None:
            self._want_write(queued)  # (at once: the peer may be waiting for this frame)
        if done:
            op.done = True  # (only ever set here: a queued frame's writer may complete it any time)

    def _after_write(self, queued: Carrier | None, done: list[SendOp]) -> None:
        if queued is not None:
            self._want_write(queued)
        if done:
            with self._lock:
                for op in done:
                    self._complete_locked(op)

    def _matched_sync(self, source: int, sync: int | SendOp | None) -> None:
        """A synchronous send was matched: tell its sender (or complete it, for a self-send)."""
        if isinstance(sync, SendOp):
            self._complete(sync)
        elif sync is not None and source != self.rank:
            self._after_write(self._peers[source].stream.push_control(Kind.MATCHED, context=sync), [])

    def _deliver_to_self(self, op: SendOp, context: int, tag: int, parts: list[memoryview], nbytes: int) -> None:
        payload = bytearray(nbytes)
        pos = 0
        for p in parts:  # the sender may reuse its buffer once this returns: copy
            payload[pos : pos + len(p)] = p
            pos += len(p)
        with self._lock:
            recv = self._matcher.take_posted(context, self.rank, tag)
            if recv is not None:
                self._fill(recv, self.rank, tag, payload)
            else:
                # A synchronous self-send completes when a receive matches it.
                self._matcher.add_unexpected(Arrived(context, self.rank, tag, payload, op if op.sync else None))
                if op.sync:
                    return
            self._complete_locked(op)

    # ============================================================ completion
    def _complete(self, op: Op) -> None:
        with self._lock:
            self._complete_locked(op)

    def _complete_locked(self, op: Op) -> None:
        op.done = True
        self._notify_locked()

    def _check_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def _peer(self, rank: int) -> Peer:
        peer = self._peers.get(rank)
        if peer is None:
            if not 0 <= rank < self.size:
                raise TransportError(f"invalid rank {rank} (job has {self.size} ranks)", "ERR_RANK")
            o = self.options
            stream = Stream(
                self.rank, rank, copy_limit=o.copy_limit, ack_window=o.ack_window, ack_every=o.ack_every,
                ack_bytes=o.ack_bytes,
            )
            peer = self._peers[rank] = Peer(rank, stream)
        return peer

    # ================================================================= stopping
    def _stop_loop(self) -> None:
        self._linker.stop()
        self._loop.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _on_loop_stop(self) -> None:
        """Last act of the progress thread: close links and the listener (the relay stays open)."""
        relay_sock = self._relay.sock if self._relay is not None else None
        for fileobj in self._loop.registered():
            if fileobj is relay_sock or fileobj in self._watched:
                continue
            if isinstance(fileobj, socket.socket):
                fileobj.close()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            links = [p.link for p in self._peers.values() if p.link is not None] + self._old_links
            self._notify_locked()  # a thread still waiting learns the loop is gone
        for link in links:
            link.close_lanes()
        self._close_bell()


def _all_done(ops: list[Op]) -> bool:
    # (a loop, not all() over a generator: this runs several times per blocking wait)
    for op in ops:
        if not op.done:
            return False
    return True
