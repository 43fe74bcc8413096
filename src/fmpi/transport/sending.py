"""The send half of the engine: messages into pair streams, and what a carrier's writing completes.

A message goes into its peer's stream (``stream.Stream.push_data``), which
writes it on the pair's carrier from the calling thread while nothing is
queued there; what the kernel does not take is finished by the progress
thread (``want_write``). A send completes on write (small), on the peer's
acknowledgement (large) or, for a synchronous send, on the peer's MATCHED.
A send to this rank itself is copied straight into the matching receive.
"""

from __future__ import annotations

from ..wire.rank_frames import Kind
from .core import Core
from .peers import Peer
from .progress import READ, WRITE
from .relay_line import RelayLine, RelayRoute
from .requests import Arrived, SendOp
from .stream import Carrier, Stream

_CONTROL = {"punch": Kind.PUNCH, "resume": Kind.RESUME, "diagnose": Kind.DIAGNOSE}


class Sender:
    """Hands messages and control frames to carriers (it owns no state beyond the core's)."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def push_message(self, peer: Peer, op: SendOp, tag: int, context: int, parts: list[memoryview]) -> None:
        """Hand the message of `op` to `peer`'s stream (a send's last steps, on every path)."""
        queued, done = peer.stream.push_data(op, tag, context, parts)
        if queued is not None:
            self.want_write(queued)  # (at once: the peer may be waiting for this frame)
        if done:
            op.done = True  # (only ever set here: a queued frame's writer may complete it any time)

    def after_write(self, queued: Carrier | None, done: list[SendOp]) -> None:
        """A stream wrote (some of) a frame: have the rest written; complete the sends it completed."""
        if queued is not None:
            self.want_write(queued)
        if done:
            core = self._core
            with core.lock:
                for op in done:
                    core.complete_locked(op)

    def want_write(self, carrier: Carrier | RelayLine) -> None:
        """Have the progress thread finish writing what `carrier` queued (any thread)."""
        loop = self._core.loop
        fileobj = carrier.channel.sock if isinstance(carrier, RelayRoute) else carrier.sock
        if loop.in_loop():
            loop.set_events(fileobj, READ | WRITE)
        else:
            loop.call_soon(lambda: loop.set_events(fileobj, READ | WRITE))

    def written(self, tokens: list[object]) -> None:
        """Frames a carrier finished writing: complete the sends that complete on write."""
        core = self._core
        with core.lock:
            for token in tokens:
                if isinstance(token, SendOp) and token.on_write:
                    core.complete_locked(token)
            core.wake.notify_locked()

    def took(self, msg: Arrived, credit: int) -> None:
        """A receive took `msg` from the unexpected queue (``Core.take_arrived``; lock released): ask for an
        announced payload (CTS), tell a synchronous sender it matched, return `credit` (0: none due)."""
        if msg.announced >= 0:
            self.control(msg.source, Kind.CTS, msg.announced)  # (a failed stream drops it)
        elif msg.sync is not None:
            self.matched_sync(msg.source, msg.sync)
        if credit:
            self.control(msg.source, Kind.CREDIT, credit)

    def control(self, rank: int, kind: Kind, context: int) -> None:
        """A sequenced frame without payload (CTS, CREDIT, MATCHED) to `rank`."""
        self.after_write(self._core.peers[rank].stream.push_control(kind, context), [])

    def send_payload(self, stream: Stream, rts_seq: int) -> None:
        """The peer's CTS for the announcement `rts_seq`: send that message's payload."""
        op = stream.take_rndv(rts_seq)
        if op is not None:
            queued, done = stream.push_payload(op)
            self.after_write(queued, [op] if done else [])

    def matched_sync(self, source: int, sync: int | SendOp | None) -> None:
        """A synchronous send was matched: tell its sender (or complete it, for a self-send)."""
        core = self._core
        if isinstance(sync, SendOp):
            core.complete(sync)
        elif sync is not None and source != core.rank:
            self.after_write(core.peers[source].stream.push_control(Kind.MATCHED, context=sync), [])

    def via_relay(self, peer: Peer, what: str) -> None:
        """An unsequenced frame ("punch", "resume" or "diagnose") to `peer` through the relay (lock may be held)."""
        relay = self._core.relay
        if relay is None:
            return
        route = RelayRoute(relay, peer.rank)
        if not route.write(peer.stream.control(_CONTROL[what]), None):
            self.want_write(route)

    def to_self(self, op: SendOp, context: int, tag: int, parts: list[memoryview], nbytes: int) -> None:
        """A message from this rank to itself: copied, then matched like any other."""
        payload = bytearray(nbytes)
        pos = 0
        for p in parts:  # the sender may reuse its buffer once this returns: copy
            payload[pos : pos + len(p)] = p
            pos += len(p)
        core = self._core
        inbox = None
        with core.lock:
            recv = core.matcher.take_posted(context, core.rank, tag)
            if recv is not None:
                core.fill(recv, core.rank, tag, payload)
            elif core.inboxes and (inbox := core.inboxes.get(context)) is not None:
                inbox.put(core.rank, tag, payload)  # (served below, in this thread: inbox.py)
            else:
                # A synchronous self-send completes when a receive matches it.
                core.matcher.add_unexpected(Arrived(context, core.rank, tag, payload, op if op.sync else None))
                if op.sync:
                    return
            core.complete_locked(op)
        if inbox is not None:
            inbox.run()
