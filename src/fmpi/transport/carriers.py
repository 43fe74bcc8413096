"""Carriers under the pair streams: TCP links made by the linker, failover to the relay, and giving up.

This part of the engine decides what carries each pair's stream and reacts
when that changes:

* a TCP link that passed the handshake is installed as the pair's carrier
  (``install``) and read by the progress thread (or a waiting thread);
* when the plan's TCP steps fail, or the link dies without the peer's BYE,
  the pair moves to the relay (``go_relay_locked``): the link is retired at
  once (nothing more is read from it), a receive matched to a frame that
  was arriving on it goes back to its place, and RESUME tells the peer the
  next sequence number expected. The peer answers with its own RESUME
  (``on_resume``) and both resend what the other lacks.

A peer that cannot be reached at all, or is gone, fails everything that
waits on it (``fail_peer_locked``), with an error that says why. The relay
connection's own events are ``relayed.py``'s.
"""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

from .. import settings
from ..wire.rank_frames import FrameError
from .core import Core
from .links.link import Link, PeerClosed, set_liveness
from .links.linkup import Linker
from .links.shm_lane import LaneReader, LaneWriter, lane_path
from .peers import Peer, PeerState
from .progress import READ, WRITE
from .receiving import Receiver
from .relay_line import RelayRoute
from .requests import Op, TransportError, peer_died, peer_finalized
from .sending import Sender

DEBUG = settings.current().debug_links  # trace link set-up and failover on stderr


class Carriers:
    """What carries each pair (the ``LinkEvents`` the linker reports to). The carriers themselves are
    fields of the peers, under the core's lock."""

    def __init__(self, core: Core, sender: Sender) -> None:
        self._core = core
        self._sender = sender
        # (both made after this part, which they report to: see ``attach``)
        self._receiver: Receiver
        self.linker: Linker

    def attach(self, receiver: Receiver, linker: Linker) -> None:
        """The frame sink of the links this part installs, and the linker it tells what became of a pair."""
        self._receiver = receiver
        self.linker = linker

    def debug(self, message: str) -> None:
        """Trace link set-up and failover on stderr (FMPI_DEBUG_LINKS)."""
        if DEBUG:
            print(f"fmpi: rank {self._core.rank} [{time.monotonic():.3f}]: {message}", file=sys.stderr, flush=True)

    def install(self, rank: int, sock: socket.socket, channel: str, role: str, lane: str = "") -> None:
        """An authenticated connection to `rank`: make it the pair's carrier (pool thread).

        `lane`: the handshake's lane stem when the peer shares this host ("": none).
        """
        core = self._core
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            set_liveness(sock, core.options.link_timeout)
        except OSError:
            pass
        link = Link(rank, sock, self._receiver, channel)
        if lane:
            link.add_lanes(
                LaneWriter(lane_path(lane, core.rank, rank), core.options.lane_capacity),
                LaneReader(lane_path(lane, rank, core.rank), core.options.lane_capacity),
            )
        with core.lock:
            peer = core.peers[rank]
            if role == "acceptor":
                peer.accepting = False
            else:
                peer.handshakes_out -= 1
            if peer.state is not PeerState.SETUP:
                sock.close()
                self.linker.advance(peer)
                return
            peer.state = PeerState.LINKED
            peer.link = link
            peer.kind = channel
            self.debug(f"linked to {rank}: {channel} as {role}, {sock.getsockname()} -> {sock.getpeername()}")
            peer.setup_seconds = time.monotonic() - (peer.setup_started or time.monotonic())
            self.linker.cancel_punch(rank)
            queued, done = peer.stream.attach(link)
            for op in done:
                core.complete_locked(op)
            info = peer.stats()
        core.loop.call_soon(lambda: self._register_link(link))
        self.report_link(info, "up")

    def _register_link(self, link: Link) -> None:
        core = self._core
        with core.lock:
            peer = core.peers.get(link.peer)
            current = peer is not None and peer.link is link and peer.state is PeerState.LINKED
        if not current:
            return
        events = READ | (WRITE if link.has_queued() else 0)
        core.loop.register(link.sock, events, lambda mask: self.on_link_event(link, mask))

    def on_link_event(self, link: Link, mask: int) -> None:
        core = self._core
        if link.retired:
            return
        failure: BaseException | None = None
        try:
            if mask & WRITE:
                tokens, empty = link.flush()
                if empty:
                    core.loop.set_events(link.sock, READ)
                self._sender.written(tokens)
            if mask & READ:
                # A waiting thread may be reading this link right now: take turns.
                with core.peers[link.peer].stream.rx_lock:
                    failure = link.read_failure
                    if failure is None and not link.retired:
                        link.on_readable()
        except (PeerClosed, OSError, FrameError) as exc:
            failure = exc
        if failure is not None:
            self._link_closed(link, None if isinstance(failure, PeerClosed) else failure)
        self._receiver.ack(link.peer, from_timer=False)

    def _retire_link(self, link: Link) -> None:
        """This link carries nothing more, starting now (lock held).

        On the progress thread it is unregistered at once, so that an event
        for it already returned by this round of ``select`` cannot feed a
        frame from it after the pair moved to the relay.
        """
        core = self._core
        link.retire()
        core.wake.notify_locked()  # a thread reading it must stop
        if core.loop.in_loop():
            self._drop_link(link)
        else:
            core.loop.call_soon(lambda: self._drop_link(link))

    def _drop_link(self, link: Link) -> None:
        """Forget a TCP link (progress thread)."""
        core = self._core
        link.retire()
        core.loop.unregister(link.sock)
        link.drop_queue()
        # (its lane files stay until the engine stops: the peer may still be reading
        # LANE headers that were in flight, and fails over to the relay if it cannot)
        try:
            link.sock.close()
        except OSError:
            pass

    def _link_closed(self, link: Link, exc: BaseException | None) -> None:
        core = self._core
        self._drop_link(link)
        with core.lock:
            peer = core.peers.get(link.peer)
            if peer is None or peer.link is not link:
                return
            self.debug(f"link to {link.peer} closed: {exc!r} (heard BYE: {peer.heard_bye})")
            if peer.heard_bye or core.closing:
                # It finalized (EOF, or a reset when it closed with our last frames
                # unread), or we did and it closed after our BYE: nothing to save.
                reason = peer_finalized(link.peer)
            elif peer.lost is not None:
                reason = peer.lost
            elif isinstance(exc, FrameError):
                reason = peer_died(link.peer, f"link to rank {link.peer} failed: {exc}")
            elif core.relay is not None and core.options.channel == "auto":
                self.go_relay_locked(peer)  # failover: resend what it has not acknowledged
                return
            elif exc is None:
                reason = peer_died(link.peer, f"rank {link.peer} closed its connection unexpectedly (did it exit or crash?)")
            else:
                reason = peer_died(link.peer, f"link to rank {link.peer} failed: {exc}")
            self.fail_peer_locked(peer, reason)

    # ------------------------------------------------------ failover
    def go_relay_locked(self, peer: Peer) -> None:
        """Carry this pair through the relay from now on (lock held). The peer answers with RESUME."""
        core = self._core
        relay = core.relay
        if relay is None:
            self.fail_peer_locked(peer, TransportError(f"cannot reach rank {peer.rank}: no relay", "ERR_UNREACHABLE"))
            return
        rank = peer.rank
        old = peer.link
        self.debug(f"pair with {rank} goes through the relay (was {peer.state.name}, errors: {peer.errors})")
        if old is not None:
            peer.failovers += 1
            peer.link = None
            core.old_links.append(old)
            self._retire_link(old)
            self.repost_inflight(rank)
        peer.state = PeerState.RELAYED
        peer.kind = "relayed"
        if old is None and not peer.why:
            peer.why = self.linker.directory.why_relayed(peer)
        self.linker.cancel_punch(rank)
        peer.stream.detach()
        self._sender.via_relay(peer, "resume")
        peer.awaiting_resume = True
        core.loop.call_later(core.options.resume_timeout, lambda: self._resume_overdue(rank))

    def on_resume(self, rank: int, upto: int) -> None:
        """The peer now carries our pair through the relay and holds all our frames below `upto`."""
        core = self._core
        relay = core.relay
        if relay is None:
            return
        with core.lock:
            peer = core.peer(rank)
            self.debug(f"RESUME from {rank} at {upto} (we are {peer.state.name})")
            if peer.state is PeerState.GONE:
                return
            if peer.state is not PeerState.RELAYED:
                if peer.setup_started is None or peer.state is PeerState.NONE:
                    peer.setup_started = time.monotonic()
                self.go_relay_locked(peer)
            first = peer.awaiting_resume and peer.setup_seconds is None
            peer.awaiting_resume = False
            if peer.setup_seconds is None:
                peer.setup_seconds = time.monotonic() - (peer.setup_started or time.monotonic())
            queued, done = peer.stream.attach(RelayRoute(relay, rank), resume_from=upto)
            for op in done:
                core.complete_locked(op)
            info = peer.stats()
            failover = peer.failovers > 0
        self._sender.after_write(queued, [])
        if first or failover:
            self.report_link(info, "failover" if failover else "up")

    def _resume_overdue(self, rank: int) -> None:
        core = self._core
        with core.lock:
            peer = core.peers.get(rank)
            if peer is None or peer.state is not PeerState.RELAYED or not peer.awaiting_resume:
                return
            t = core.options.resume_timeout
            self.fail_peer_locked(
                peer, peer_died(rank, f"rank {rank} did not answer through the relay within {t:g} s (is it hung or stopped?)")
            )

    def repost_inflight(self, rank: int) -> None:
        """A frame was arriving on a link that died: its receive goes back where it was (lock held)."""
        core = self._core
        recv, _ = core.inflight.pop(rank, (None, None))
        if recv is not None and not recv.done:
            core.matcher.repost(recv)

    # ------------------------------------------------ giving up on a peer
    def fail_peer_locked(self, peer: Peer, reason: TransportError) -> None:
        """`peer` is unreachable for good: fail everything that depends on it (lock held)."""
        core = self._core
        if peer.state is PeerState.GONE:
            return
        rank = peer.rank
        peer.state = PeerState.GONE
        peer.error = reason
        link = peer.link  # (kept on the peer, closed, for its byte counts)
        peer.awaiting_resume = False
        self.linker.cancel_punch(rank)
        failed: list[Op] = list(peer.stream.fail(reason))
        failed += core.matcher.take_posted_where(lambda r: r.source == rank)
        failed += peer.awaiting.values()
        peer.awaiting.clear()
        recv, _ = core.inflight.pop(rank, (None, None))
        if recv is not None:
            failed.append(recv)
        for op in failed:
            if not op.done:
                op.error = reason
                core.complete_locked(op)
        core.wake.notify_locked()
        if link is not None:
            self._retire_link(link)

    def report_link(self, info: dict[str, Any], event: str) -> None:
        core = self._core
        handler = core.handler
        if handler is not None:
            try:
                handler.link_event(dict(info, event=event))
            except Exception as exc:  # reporting must never break a link
                print(f"fmpi: rank {core.rank}: cannot report a link: {exc!r}", file=sys.stderr)
