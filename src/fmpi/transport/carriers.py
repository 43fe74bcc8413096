"""Carriers under the pair streams: TCP links made by the linker, the relay, and failover between them.

The engine (``engine.py``) delivers messages; this half of it decides what
carries each pair's stream and reacts when that changes:

* a TCP link that passed the handshake is installed as the pair's carrier
  (``_install``) and read by the progress thread;
* when the plan's TCP steps fail, or the link dies without the peer's BYE,
  the pair moves to the relay (``_go_relay_locked``): the link is retired at
  once (nothing more is read from it), a receive matched to a frame that
  was arriving on it goes back to its place, and RESUME tells the peer the
  next sequence number expected. The peer answers with its own RESUME
  (``_on_resume``) and both resend what the other lacks;
* the relay connection itself carries control frames (aborts, a peer lost,
  an undeliverable FORWARD) and the relayed streams (``_on_forward``).

A peer that cannot be reached at all, or is gone, fails everything that
waits on it (``_fail_peer_locked``), with an error that says why.
"""

from __future__ import annotations

import socket
import sys
import time
from typing import Any, Protocol

from .. import settings
from ..wire.rank_frames import FrameError, Kind
from ..wire.relay_protocol import Kind as RelayKind
from ..wire.relay_protocol import ProtocolError
from .assembler import FrameAssembler
from .link import Link, PeerClosed, set_liveness
from .peers import Peer, PeerState
from .progress import READ, WRITE
from .relay_channel import RelayChannel, RelayLost, RelayRoute
from .requests import Op, SendOp, TransportError, peer_died, peer_finalized
from .shm_lane import LaneReader, LaneWriter, lane_path
from .stream import Carrier

DEBUG = settings.current().debug_links  # trace link set-up and failover on stderr



class RelayHandler(Protocol):
    """Who hears about relay events the transport does not handle itself (the rank's session)."""

    def relay_control(self, kind: RelayKind, body: dict[str, Any]) -> None: ...
    def relay_lost(self, error: Exception) -> None: ...
    def link_event(self, info: dict[str, Any]) -> None: ...


class CarrierMixin:
    """The carrier half of ``Engine`` (it uses the engine's lock, peers, loop and options)."""

    # ======================================== the relay connection
    def attach_relay(self, sock: socket.socket, handler: RelayHandler, leftover: bytes = b"") -> None:
        """Use `sock` (the rank's registered relay connection) for control, punching and relayed links."""
        channel = RelayChannel(
            sock, on_forward=self._on_forward, on_control=self._on_relay_control, leftover=leftover,
            chunk=self.options.relay_chunk,
        )
        with self._lock:
            self._relay = channel
            self._relay_handler = handler
        self._loop.call_soon(lambda: self._register_relay(channel))

    def replace_relay(self, sock: socket.socket, leftover: bytes = b"") -> None:
        """The job's relay restarted and this rank has registered again on `sock`: carry on over it.

        Whatever the old relay held is gone: the control frames it had not
        passed on, and the relayed streams' frames in flight. Every relayed
        pair therefore exchanges RESUME again through the new relay (the
        relay holds a RESUME for a peer that has not rejoined yet), and each
        side resends what the other has not acknowledged; sequence numbers
        drop what arrives twice. Direct links never noticed the restart.
        """
        channel = RelayChannel(
            sock, on_forward=self._on_forward, on_control=self._on_relay_control, leftover=leftover,
            chunk=self.options.relay_chunk,
        )
        self._loop.call_soon(lambda: self._adopt_relay(channel))

    def _adopt_relay(self, channel: RelayChannel) -> None:
        """Progress thread: switch to the rejoined relay connection (see ``replace_relay``)."""
        with self._lock:
            old, self._relay = self._relay, channel
            # Frames the old relay cut off half way are resent whole: start every relayed stream afresh.
            self._relay_asm.clear()
        if old is not None:
            old.sock.close()
        self._register_relay(channel)
        with self._lock:
            for peer in self._peers.values():
                if peer.state is PeerState.RELAYED:
                    self._repost_inflight(peer.rank)
                    self._go_relay_locked(peer)

    def has_relay(self) -> bool:
        return self._relay is not None

    @property
    def relay(self) -> RelayChannel | None:
        return self._relay

    def relay_send(self, kind: RelayKind, body: dict[str, Any], flush_timeout: float = 2.0) -> None:
        """A control frame to the relay (thread-safe); written at once if the progress thread is gone."""
        relay = self._relay
        if relay is None:
            raise TransportError("this rank has no relay connection", "ERR_RELAY")
        if not relay.send_control(kind, body):
            if self._loop.stopped:
                relay.drain(flush_timeout)
            else:
                self._want_write(relay)

    def _send_control_via_relay(self, peer: Peer, what: str) -> None:
        """An unsequenced frame (PUNCH or RESUME) to `peer` through the relay (lock may be held)."""
        relay = self._relay
        if relay is None:
            return
        kind = {"punch": Kind.PUNCH, "resume": Kind.RESUME, "diagnose": Kind.DIAGNOSE}[what]
        route = RelayRoute(relay, peer.rank)
        if not route.write(peer.stream.control(kind), None):
            self._want_write(route)

    # ===================================================== writing
    def _want_write(self, carrier: Carrier | RelayChannel) -> None:
        """Have the progress thread finish writing what `carrier` queued (any thread)."""
        fileobj = carrier.channel.sock if isinstance(carrier, RelayRoute) else carrier.sock
        if self._loop.in_loop():
            self._loop.set_events(fileobj, READ | WRITE)
        else:
            self._loop.call_soon(lambda: self._loop.set_events(fileobj, READ | WRITE))

    def _written(self, tokens: list[object]) -> None:
        """Frames a carrier finished writing: complete the sends that complete on write."""
        with self._lock:
            for token in tokens:
                if isinstance(token, SendOp) and token.on_write:
                    self._complete_locked(token)
            self._notify_locked()

    # ==================================== TCP links: install, lose
    def debug(self, message: str) -> None:
        if DEBUG:
            print(f"fmpi: rank {self.rank} [{time.monotonic():.3f}]: {message}", file=sys.stderr, flush=True)

    def _install(self, rank: int, sock: socket.socket, channel: str, role: str, lane: str = "") -> None:
        """An authenticated connection to `rank`: make it the pair's carrier (pool thread).

        `lane`: the handshake's lane stem when the peer shares this host ("": none).
        """
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            set_liveness(sock, self.options.link_timeout)
        except OSError:
            pass
        link = Link(rank, sock, self, channel)
        if lane:
            link.add_lanes(
                LaneWriter(lane_path(lane, self.rank, rank), self.options.lane_capacity),
                LaneReader(lane_path(lane, rank, self.rank), self.options.lane_capacity),
            )
        with self._lock:
            peer = self._peers[rank]
            if role == "acceptor":
                peer.accepting = False
            else:
                peer.handshakes_out -= 1
            if peer.state is not PeerState.SETUP:
                sock.close()
                self._linker._advance(peer)
                return
            peer.state = PeerState.LINKED
            peer.link = link
            peer.kind = channel
            self.debug(f"linked to {rank}: {channel} as {role}, {sock.getsockname()} -> {sock.getpeername()}")
            peer.setup_seconds = time.monotonic() - (peer.setup_started or time.monotonic())
            self._linker.cancel_punch(rank)
            queued, done = peer.stream.attach(link)
            for op in done:
                self._complete_locked(op)
            info = peer.stats()
        self._loop.call_soon(lambda: self._register_link(link))
        self._report_link(info, "up")

    def _register_link(self, link: Link) -> None:
        with self._lock:
            peer = self._peers.get(link.peer)
            current = peer is not None and peer.link is link and peer.state is PeerState.LINKED
        if not current:
            return
        events = READ | (WRITE if link.has_queued() else 0)
        self._loop.register(link.sock, events, lambda mask: self._on_link_event(link, mask))

    def _on_link_event(self, link: Link, mask: int) -> None:
        if link.retired:
            return
        failure: BaseException | None = None
        try:
            if mask & WRITE:
                tokens, empty = link.flush()
                if empty:
                    self._loop.set_events(link.sock, READ)
                self._written(tokens)
            if mask & READ:
                # A waiting thread may be reading this link right now: take turns.
                with self._peers[link.peer].stream.rx_lock:
                    failure = link.read_failure
                    if failure is None and not link.retired:
                        link.on_readable()
        except (PeerClosed, OSError, FrameError) as exc:
            failure = exc
        if failure is not None:
            self._link_closed(link, None if isinstance(failure, PeerClosed) else failure)
        self._ack(link.peer, from_timer=False)

    def _retire_link(self, link: Link) -> None:
        """This link carries nothing more, starting now (lock held).

        On the progress thread it is unregistered at once, so that an event
        for it already returned by this round of ``select`` cannot feed a
        frame from it after the pair moved to the relay.
        """
        link.retire()
        self._notify_locked()  # a thread reading it must stop
        if self._loop.in_loop():
            self._drop_link(link)
        else:
            self._loop.call_soon(lambda: self._drop_link(link))

    def _drop_link(self, link: Link) -> None:
        """Forget a TCP link (progress thread)."""
        link.retire()
        self._loop.unregister(link.sock)
        link.drop_queue()
        # (its lane files stay until the engine stops: the peer may still be reading
        # LANE headers that were in flight, and fails over to the relay if it cannot)
        try:
            link.sock.close()
        except OSError:
            pass

    def _link_closed(self, link: Link, exc: BaseException | None) -> None:
        self._drop_link(link)
        with self._lock:
            peer = self._peers.get(link.peer)
            if peer is None or peer.link is not link:
                return
            self.debug(f"link to {link.peer} closed: {exc!r} (heard BYE: {peer.heard_bye})")
            if peer.heard_bye or self._closing:
                # It finalized (EOF, or a reset when it closed with our last frames
                # unread), or we did and it closed after our BYE: nothing to save.
                reason = peer_finalized(link.peer)
            elif peer.lost is not None:
                reason = peer.lost
            elif isinstance(exc, FrameError):
                reason = peer_died(link.peer, f"link to rank {link.peer} failed: {exc}")
            elif self._relay is not None and self.options.channel == "auto":
                self._go_relay_locked(peer)  # failover: resend what it has not acknowledged
                return
            elif exc is None:
                reason = peer_died(link.peer, f"rank {link.peer} closed its connection unexpectedly (did it exit or crash?)")
            else:
                reason = peer_died(link.peer, f"link to rank {link.peer} failed: {exc}")
            self._fail_peer_locked(peer, reason)

    # ============================== the relay as carrier, failover
    def _go_relay_locked(self, peer: Peer) -> None:
        """Carry this pair through the relay from now on (lock held). The peer answers with RESUME."""
        relay = self._relay
        if relay is None:
            self._fail_peer_locked(peer, TransportError(f"cannot reach rank {peer.rank}: no relay", "ERR_UNREACHABLE"))
            return
        rank = peer.rank
        old = peer.link
        self.debug(f"pair with {rank} goes through the relay (was {peer.state.name}, errors: {peer.errors})")
        if old is not None:
            peer.failovers += 1
            peer.link = None
            self._old_links.append(old)
            self._retire_link(old)
            self._repost_inflight(rank)
        peer.state = PeerState.RELAYED
        peer.kind = "relayed"
        self._linker.cancel_punch(rank)
        peer.stream.detach()
        self._send_control_via_relay(peer, "resume")
        peer.awaiting_resume = True
        self._loop.call_later(self.options.resume_timeout, lambda: self._resume_overdue(rank))

    def _on_resume(self, rank: int, upto: int) -> None:
        """The peer now carries our pair through the relay and holds all our frames below `upto`."""
        relay = self._relay
        if relay is None:
            return
        with self._lock:
            peer = self._peer(rank)
            self.debug(f"RESUME from {rank} at {upto} (we are {peer.state.name})")
            if peer.state is PeerState.GONE:
                return
            if peer.state is not PeerState.RELAYED:
                if peer.setup_started is None or peer.state is PeerState.NONE:
                    peer.setup_started = time.monotonic()
                self._go_relay_locked(peer)
            first = peer.awaiting_resume and peer.setup_seconds is None
            peer.awaiting_resume = False
            if peer.setup_seconds is None:
                peer.setup_seconds = time.monotonic() - (peer.setup_started or time.monotonic())
            queued, done = peer.stream.attach(RelayRoute(relay, rank), resume_from=upto)
            for op in done:
                self._complete_locked(op)
            info = peer.stats()
            failover = peer.failovers > 0
        self._after_write(queued, [])
        if first or failover:
            self._report_link(info, "failover" if failover else "up")

    def _resume_overdue(self, rank: int) -> None:
        with self._lock:
            peer = self._peers.get(rank)
            if peer is None or peer.state is not PeerState.RELAYED or not peer.awaiting_resume:
                return
            t = self.options.resume_timeout
            self._fail_peer_locked(
                peer, peer_died(rank, f"rank {rank} did not answer through the relay within {t:g} s (is it hung or stopped?)")
            )

    def _repost_inflight(self, rank: int) -> None:
        """A frame was arriving on a link that died: its receive goes back where it was (lock held)."""
        recv, _ = self._inflight.pop(rank, (None, None))
        if recv is not None and not recv.done:
            self._matcher.repost(recv)

    # ========================================= giving up on a peer
    def _fail_peer_locked(self, peer: Peer, reason: TransportError) -> None:
        """`peer` is unreachable for good: fail everything that depends on it (lock held)."""
        if peer.state is PeerState.GONE:
            return
        rank = peer.rank
        peer.state = PeerState.GONE
        peer.error = reason
        link = peer.link  # (kept on the peer, closed, for its byte counts)
        peer.awaiting_resume = False
        self._linker.cancel_punch(rank)
        failed: list[Op] = list(peer.stream.fail(reason))
        failed += self._matcher.take_posted_where(lambda r: r.source == rank)
        recv, _ = self._inflight.pop(rank, (None, None))
        if recv is not None:
            failed.append(recv)
        for op in failed:
            if not op.done:
                op.error = reason
                self._complete_locked(op)
        self._notify_locked()
        if link is not None:
            self._retire_link(link)

    def _report_link(self, info: dict[str, Any], event: str) -> None:
        handler = self._relay_handler
        if handler is not None:
            try:
                handler.link_event(dict(info, event=event))
            except Exception as exc:  # reporting must never break a link
                print(f"fmpi: rank {self.rank}: cannot report a link: {exc!r}", file=sys.stderr)

    # ================================================ relay events
    def _register_relay(self, channel: RelayChannel) -> None:
        events = READ | (WRITE if channel.has_queued() else 0)
        self._loop.register(channel.sock, events, self._on_relay_event)
        self._last_beat = time.monotonic()
        self._loop.call_later(self.options.heartbeat_interval, self._heartbeat)

    def _heartbeat(self) -> None:
        """Progress thread, every heartbeat_interval: tell the relay we live; notice when it no longer does.

        A relay (or the path to it) that vanishes without a FIN would leave this
        rank waiting forever; the relay beats too, once it has heard ours.
        """
        relay = self._relay
        if relay is None or relay.lost:
            return
        now = time.monotonic()
        interval = self.options.heartbeat_interval
        if now - self._last_beat > interval + 0.5:
            # This thread was not running (a starved host): do not blame the relay for it.
            relay.last_heard = max(relay.last_heard, now - interval)
        self._last_beat = now
        silent = now - relay.last_heard
        if relay.beats_heard and silent > self.options.heartbeat_timeout:
            self._relay_gone(RelayLost(f"no word from the relay for {silent:.1f} s"))
            return
        if not relay.send_control(RelayKind.HEARTBEAT, {}):
            self._want_write(relay)
        self._loop.call_later(self.options.heartbeat_interval, self._heartbeat)

    def _relay_gone(self, exc: Exception) -> None:
        relay = self._relay
        if relay is None or relay.lost:
            return
        relay.lost = True
        self._loop.unregister(relay.sock)
        handler = self._relay_handler
        if handler is not None:
            handler.relay_lost(exc)

    def _on_relay_event(self, mask: int) -> None:
        relay = self._relay
        assert relay is not None
        try:
            if mask & WRITE:
                tokens, empty = relay.flush()
                if empty:
                    self._loop.set_events(relay.sock, READ)
                self._written(tokens)
            if mask & READ:
                relay.on_readable()
        except (RelayLost, ProtocolError, OSError) as exc:
            self._relay_gone(exc)
        finally:
            self._after_reads()

    def _on_forward(self, src: int, chunk: memoryview) -> None:
        """A chunk of a peer's relayed stream (progress thread)."""
        if not 0 <= src < self.size or src == self.rank:
            return
        asm = self._relay_asm.get(src)
        if asm is None:
            with self._lock:
                self._peer(src)
            asm = self._relay_asm[src] = FrameAssembler(src, "relay", self)
        try:
            with self._peers[src].stream.rx_lock:  # a waiting thread may still read the old link
                asm.feed(chunk)
        except FrameError as exc:
            with self._lock:
                self._fail_peer_locked(self._peers[src], peer_died(src, f"relayed link to rank {src} failed: {exc}"))

    def _on_relay_control(self, kind: RelayKind, body: dict[str, Any]) -> None:
        if kind is RelayKind.HEARTBEAT:
            assert self._relay is not None
            self._relay.beats_heard = True
            return
        if kind in (RelayKind.UNDELIVERABLE, RelayKind.PEER_LOST):
            rank = body.get("rank")
            if isinstance(rank, int) and 0 <= rank < self.size and rank != self.rank:
                self._peer_gone(rank, str(body.get("reason", "lost")))
            return
        handler = self._relay_handler
        if handler is not None:
            handler.relay_control(kind, body)

    def _peer_gone(self, rank: int, why: str) -> None:
        """The relay says `rank` left the job (finished, or lost without finalizing)."""
        if why == "finished":
            reason = peer_finalized(rank)
        else:
            reason = peer_died(rank, f"rank {rank} is gone: it left the job without finalizing (did it exit or crash?)")
        with self._lock:
            peer = self._peer(rank)
            if peer.state is PeerState.LINKED and peer.link is not None:
                # Its last frames may still be in our socket: let the link's EOF end
                # it, or, if its host vanished and no EOF will ever come, the grace timer.
                peer.lost = reason
                self._loop.call_later(self.options.lost_grace, lambda: self._lost_overdue(rank))
                return
            self._fail_peer_locked(peer, reason)

    def _lost_overdue(self, rank: int) -> None:
        with self._lock:
            peer = self._peers.get(rank)
            if peer is None or peer.state is not PeerState.LINKED or peer.lost is None:
                return
            self.debug(f"rank {rank} is lost and its link still open after {self.options.lost_grace:g} s: closing it")
            self._fail_peer_locked(peer, peer.lost)

    # ================================================ the listener
    def _on_acceptable(self, _mask: int) -> None:
        try:
            sock, _addr = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            print(f"fmpi: rank {self.rank}: accept failed: {exc}", file=sys.stderr)
            return
        self._linker.accepted(sock)
