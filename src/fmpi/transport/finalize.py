"""Finalizing a rank's transport: deliver what was sent, say BYE to every peer, close links cleanly."""

from __future__ import annotations

import socket
import sys
import time

from ..wire.rank_frames import Kind
from .core import Core
from .peers import Peer, PeerState
from .sending import Sender


def finalize(core: Core, sender: Sender, timeout: float) -> None:
    """Wait (up to `timeout`) until every frame sent is acknowledged, say BYE, half-close each link and
    drain it until the peer closed its side too; the caller then stops the progress loop."""
    deadline = time.monotonic() + timeout
    with core.lock:
        core.draining = True  # from now on, acknowledgements wake this wait
        while core.fatal is None and not core.loop.stopped and _busy(core):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                print(f"fmpi: rank {core.rank}: finalize gave up on unsent messages", file=sys.stderr)
                break
            core.wake.sleep(None, "finalize", min(remaining, 0.5))
        byes = [p for p in core.peers.values() if p.state in (PeerState.LINKED, PeerState.RELAYED)]
        core.closing = True
    if core.fatal is None:
        for peer in byes:
            sender.after_write(peer.stream.push_control(Kind.BYE), [])
    _half_close(core, byes)
    # Drain until every linked peer has closed its side too (bounded): closing
    # with unread bytes in the receive queue would make the kernel send RST.
    end = time.monotonic() + 0.5
    with core.lock:
        while any(p.state is PeerState.LINKED for p in core.peers.values()):
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            core.wake.sleep(None, "finalize", remaining)


def _half_close(core: Core, byes: list[Peer]) -> None:
    """Let the BYEs out, then half-close: the peer reads BYE, then EOF."""
    end = time.monotonic() + 0.5
    with core.lock:
        while any(p.link is not None and p.link.has_queued() for p in byes) and time.monotonic() < end:
            core.wake.sleep(None, "finalize", 0.05)
        links = [p.link for p in byes if p.link is not None]
    for link in links:
        try:
            link.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _busy(core: Core) -> bool:
    """(lock held) Something sent is not acknowledged yet, or not written yet."""
    for p in core.peers.values():
        if p.state in (PeerState.SETUP, PeerState.LINKED, PeerState.RELAYED) and not p.heard_bye:
            if p.stream.pending():
                return True
        if p.link is not None and p.link.has_queued():
            return True
    return core.relay is not None and core.relay.has_queued()
