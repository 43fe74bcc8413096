"""The relay connection as the engine sees it: control frames, heartbeats, relayed streams, peers gone.

The rank's line to the relay (a ``relay_line.RelayLine``: the registered
fmpi-relay connection, or the Redis line) carries the job's control frames (aborts, a peer lost, an undeliverable
FORWARD: passed to the rank's session, the ``RelayHandler``), the answers to
the linker's lookups of peers' records (PEERS), heartbeats
both ways, and the pair streams that go through the relay (FORWARD chunks,
reassembled per peer here and handed to the receiver). A relay connection
made again (the relay restarted, or the old connection broke) is adopted
(``replace_relay``); a peer whose own relay connection broke and came back
(PEER_BACK) gets its relayed stream started over; a relay that vanished ends
the rank through its session.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..wire.rank_frames import FrameError
from ..wire.relay_protocol import Kind as RelayKind
from ..wire.relay_protocol import ProtocolError
from .assembler import FrameAssembler
from .carriers import Carriers
from .core import Core, RelayHandler
from .peers import PeerState
from .progress import READ, WRITE
from .receiving import Receiver
from .relay_channel import RelayLost
from .relay_line import RelayLine
from .requests import TransportError, peer_died, peer_finalized
from .sending import Sender


class Relayed:
    """The relay connection's events. It owns the per-peer assemblers of relayed streams and the time
    of the last heartbeat."""

    def __init__(
        self, core: Core, sender: Sender, receiver: Receiver, carriers: Carriers,
        on_peers: Callable[[dict[str, Any]], None], ask_again: Callable[[], None],
    ) -> None:
        self._core = core
        self._on_peers = on_peers  # a PEERS answer to the linker's lookups
        self._ask_again = ask_again  # lookups the old relay connection carried, asked again on the new one
        self._sender = sender
        self._receiver = receiver
        self._carriers = carriers
        self._assemblers: dict[int, FrameAssembler] = {}
        self._last_beat = 0.0

    def attach_relay(self, channel: RelayLine, handler: RelayHandler) -> None:
        """Use `channel` (the rank's line to the relay) for control, punching and relayed links."""
        core = self._core
        channel.bind(self._on_forward, self._on_relay_control)
        with core.lock:
            core.relay = channel
            core.handler = handler
        core.loop.call_soon(lambda: self._register_relay(channel))

    def replace_relay(self, channel: RelayLine) -> None:
        """The job's relay restarted and this rank has registered again on `channel`: carry on over it.

        Whatever the old relay held is gone: the control frames it had not
        passed on, and the relayed streams' frames in flight. Every relayed
        pair therefore exchanges RESUME again through the new relay (the
        relay holds a RESUME for a peer that has not rejoined yet), and each
        side resends what the other has not acknowledged; sequence numbers
        drop what arrives twice. Direct links never noticed the restart.
        """
        channel.bind(self._on_forward, self._on_relay_control)
        self._core.loop.call_soon(lambda: self._adopt_relay(channel))

    def _adopt_relay(self, channel: RelayLine) -> None:
        """Progress thread: switch to the rejoined relay connection (see ``replace_relay``)."""
        core = self._core
        with core.lock:
            old, core.relay = core.relay, channel
            # Frames the old relay cut off half way are resent whole: start every relayed stream afresh.
            self._assemblers.clear()
        if old is not None:
            old.sock.close()
        self._register_relay(channel)
        self._ask_again()
        with core.lock:
            for peer in core.peers.values():
                if peer.state is PeerState.RELAYED:
                    self._carriers.repost_inflight(peer.rank)
                    self._carriers.go_relay_locked(peer)

    def relay_send(self, kind: RelayKind, body: dict[str, Any], flush_timeout: float = 2.0) -> None:
        """A control frame to the relay (thread-safe); written at once if the progress thread is gone."""
        core = self._core
        relay = core.relay
        if relay is None:
            raise TransportError("this rank has no relay connection", "ERR_RELAY")
        if not relay.send_control(kind, body):
            if core.loop.stopped:
                relay.drain(flush_timeout)
            else:
                self._sender.want_write(relay)

    # ------------------------------------------------------------ events
    def _register_relay(self, channel: RelayLine) -> None:
        core = self._core
        events = READ | (WRITE if channel.has_queued() else 0)
        core.loop.register(channel.sock, events, self._on_relay_event)
        self._last_beat = time.monotonic()
        core.loop.call_later(core.options.heartbeat_interval, lambda: self._heartbeat(channel))

    def _heartbeat(self, relay: RelayLine) -> None:
        """Progress thread, every heartbeat_interval: tell the relay we live; notice when it no longer does.

        A relay (or the path to it) that vanishes without a FIN would leave this
        rank waiting forever; the relay beats too, once it has heard ours.
        Each connection has its own beat, which ends with it.
        """
        core = self._core
        if relay is not core.relay or relay.lost:
            return
        now = time.monotonic()
        interval = core.options.heartbeat_interval
        if now - self._last_beat > interval + 0.5:
            # This thread was not running (a starved host): do not blame the relay for it.
            relay.last_heard = max(relay.last_heard, now - interval)
        self._last_beat = now
        silent = now - relay.last_heard
        if relay.beats_heard and silent > core.options.heartbeat_timeout:
            self._relay_gone(RelayLost(f"no word from the relay for {silent:.1f} s"))
            return
        if not relay.send_control(RelayKind.HEARTBEAT, {}):
            self._sender.want_write(relay)
        core.loop.call_later(core.options.heartbeat_interval, lambda: self._heartbeat(relay))

    def _relay_gone(self, exc: Exception) -> None:
        core = self._core
        relay = core.relay
        if relay is None or relay.lost:
            return
        relay.lost = True
        core.loop.unregister(relay.sock)
        handler = core.handler
        if handler is not None:
            handler.relay_lost(exc)

    def _on_relay_event(self, mask: int) -> None:
        core = self._core
        relay = core.relay
        assert relay is not None
        try:
            if mask & WRITE:
                tokens, empty = relay.flush()
                if empty:
                    core.loop.set_events(relay.sock, READ)
                self._sender.written(tokens)
            if mask & READ:
                relay.on_readable()
        except (RelayLost, ProtocolError, OSError) as exc:
            self._relay_gone(exc)
        finally:
            self._receiver.after_reads()

    def _on_forward(self, src: int, chunk: memoryview) -> None:
        """A chunk of a peer's relayed stream (progress thread)."""
        core = self._core
        if not 0 <= src < core.size or src == core.rank:
            return
        asm = self._assemblers.get(src)
        if asm is None:
            with core.lock:
                core.peer(src)
            asm = self._assemblers[src] = FrameAssembler(src, "relay", self._receiver)
        try:
            with core.peers[src].stream.rx_lock:  # a waiting thread may still read the old link
                asm.feed(chunk)
        except FrameError as exc:
            with core.lock:
                self._carriers.fail_peer_locked(core.peers[src], peer_died(src, f"relayed link to rank {src} failed: {exc}"))

    def _on_relay_control(self, kind: RelayKind, body: dict[str, Any]) -> None:
        core = self._core
        if kind is RelayKind.HEARTBEAT:
            assert core.relay is not None
            core.relay.beats_heard = True
            return
        if kind is RelayKind.PEERS:
            self._on_peers(body)
            return
        if kind in (RelayKind.UNDELIVERABLE, RelayKind.PEER_LOST, RelayKind.PEER_BACK):
            rank = body.get("rank")
            if not (isinstance(rank, int) and 0 <= rank < core.size and rank != core.rank):
                return
            if kind is RelayKind.PEER_BACK:
                self._peer_back(rank)
            else:
                self._peer_gone(rank, str(body.get("reason", "lost")))
            return
        handler = core.handler
        if handler is not None:
            handler.relay_control(kind, body)

    def _peer_back(self, rank: int) -> None:
        """`rank`'s relay connection broke and it reconnected: what was relayed between us in the meantime is lost
        both ways, and a frame from it may have been cut in its middle.

        So its stream is read afresh, the relay hears RESYNCED (our FORWARDs to it
        start at a frame boundary from here on: it drops those before), and a
        relayed pair exchanges RESUME again, as after a relay restart.
        """
        core = self._core
        relay = core.relay
        assert relay is not None
        with core.lock:
            self._assemblers.pop(rank, None)
            if not relay.send_control(RelayKind.RESYNCED, {"rank": rank}):
                self._sender.want_write(relay)
            peer = core.peers.get(rank)
            if peer is not None and peer.state is PeerState.RELAYED:
                self._carriers.repost_inflight(rank)
                self._carriers.go_relay_locked(peer)

    def _peer_gone(self, rank: int, why: str) -> None:
        """The relay says `rank` left the job (finished, or lost without finalizing)."""
        core = self._core
        if why == "finished":
            reason = peer_finalized(rank)
        else:
            reason = peer_died(rank, f"rank {rank} is gone: it left the job without finalizing (did it exit or crash?)")
        with core.lock:
            peer = core.peer(rank)
            if peer.state is PeerState.LINKED and peer.link is not None:
                # Its last frames may still be in our socket: let the link's EOF end
                # it, or, if its host vanished and no EOF will ever come, the grace timer.
                peer.lost = reason
                core.loop.call_later(core.options.lost_grace, lambda: self._lost_overdue(rank))
                return
            self._carriers.fail_peer_locked(peer, reason)

    def _lost_overdue(self, rank: int) -> None:
        core = self._core
        with core.lock:
            peer = core.peers.get(rank)
            if peer is None or peer.state is not PeerState.LINKED or peer.lost is None:
                return
            self._carriers.debug(f"rank {rank} is lost and its link still open after {core.options.lost_grace:g} s: closing it")
            self._carriers.fail_peer_locked(peer, peer.lost)
