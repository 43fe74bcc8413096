"""The receive half of the engine: frames from any carrier become matched messages and acknowledgements.

An assembler (``assembler.py``) reports each frame of a pair's stream here,
whichever thread read it (the progress thread, or a thread waiting for a
message: ``waiting.py``) and whatever carried it (a TCP link, the relay).
The reader holds the pair stream's ``rx_lock``, so one pair's frames are
processed one at a time, in order.

* A DATA frame is matched when its header arrives: into a posted receive's
  buffer when one matches (large payloads are then read straight into it),
  else into a new buffer that waits in the unexpected queue. A small frame
  that arrived whole in one read takes a one-step path (``frame_whole``).
* Acknowledgements ride on every frame; ``ack`` sends a bare one when due
  now, or arms the delayed-ACK timer.
"""

from __future__ import annotations

from typing import Callable

from ..wire.rank_frames import Flag, Header, Kind
from .assembler import FrameAssembler
from .core import Core
from .requests import Arrived
from .sending import Sender
from .flow import MESSAGE_COST
from .inbox import InboxRecv
from .stream import Stream

# Frames at least this large that their sender waits on are acknowledged the
# moment they are in; smaller ones once the read batch is done (one ACK for many).
EARLY_ACK = 256 * 1024
_SEQUENCED = frozenset((Kind.DATA, Kind.MATCHED, Kind.BYE, Kind.RTS, Kind.CTS, Kind.CREDIT))


class Receiver:
    """The engine's ``FrameSink``: what every assembler reports frames to. It owns the set of pairs whose
    relayed frames await an acknowledgement."""

    def __init__(
        self, core: Core, sender: Sender, on_resume: Callable[[int, int], None], on_punch: Callable[[int], None],
        on_diagnose: Callable[[int], None],
    ) -> None:
        self._core = core
        self._sender = sender
        self._on_resume = on_resume  # a peer carries our pair through the relay now (``Carriers.on_resume``)
        self._on_punch = on_punch  # a peer asks us to punch towards it (``Linker.on_punch_request``)
        self._on_diagnose = on_diagnose  # a peer asks what we wait for (hang diagnosis)
        self._touched: set[int] = set()  # peers whose relayed sequenced frames arrived in this read batch

    def frame_started(self, source: FrameAssembler, header: Header) -> memoryview | None:
        core = self._core
        rank = source.peer
        if source.retired:
            return None
        stream = core.peers[rank].stream
        if header.ack > stream._acked_in:
            # Take the acknowledgement now rather than after a long payload: a
            # large send waiting for it completes sooner.
            self.acknowledged(stream, header.ack)
        if not stream.check_seq(header.seq):
            return None  # a duplicate (resent after a failover): discard its bytes
        if header.flags & Flag.RNDV:  # an announced payload: its receive is matched already
            with core.lock:
                dest = core.payload_destination(rank, header.context, header.nbytes)
                # (no receive in `inflight`: after a failover it waits for the resent payload, unmatched by none)
                core.inflight[rank] = (None, bytearray())
            return None if dest is None else memoryview(dest)
        with core.lock:
            recv = core.matcher.take_posted(header.context, rank, header.tag)
            dest: memoryview | bytearray
            if recv is not None and recv.buffer is not None and header.nbytes <= len(recv.buffer):
                dest = recv.buffer[: header.nbytes]
            else:
                dest = bytearray(header.nbytes)
            core.inflight[rank] = (recv, dest)
        if recv is not None and header.flags & Flag.SYNC:
            self._sender.matched_sync(rank, header.seq)
        return dest if isinstance(dest, memoryview) else memoryview(dest)

    def frame_whole(
        self, source: FrameAssembler, flags: int, tag: int, context: int, seq: int, ack: int, payload: memoryview
    ) -> None:
        """``frame_started`` + ``frame_finished`` in one step, for a DATA frame read whole."""
        core = self._core
        if source.retired:
            return
        rank = source.peer
        stream = core.peers[rank].stream
        if ack > stream._acked_in:
            self.acknowledged(stream, ack)
        n = len(payload)
        if not stream.accept(seq, n, flags):
            return  # a duplicate
        if source.via == "relay":
            self._touched.add(rank)
        elif flags & Flag.ACK_NOW and n >= EARLY_ACK:
            self._sender.after_write(stream.send_ack(), [])
        if flags & Flag.RNDV:
            with core.lock:
                done = core.deliver_payload(rank, context, tag, n, payload)
            if done.__class__ is InboxRecv:
                done.inbox.run()  # type: ignore[union-attr]
            return
        inbox = None
        with core.lock:
            recv = core.matcher.take_posted(context, rank, tag)
            if recv is None and core.inboxes and (inbox := core.inboxes.get(context)) is not None:
                inbox.put(rank, tag, bytearray(payload))  # (served below, in this thread: inbox.py)
                credit = stream.credit.consume(n + MESSAGE_COST)
            elif recv is None:
                sync = seq if flags & Flag.SYNC else None
                cost = n + MESSAGE_COST
                if flags & Flag.LANE:  # it waits in the lane for its receive: no copy now (``LaneReader.hold``)
                    lane = source.lane
                    msg = Arrived(context, rank, tag, payload, sync, lane, lane.hold(), cost)  # type: ignore[union-attr]
                else:
                    msg = Arrived(context, rank, tag, bytearray(payload), sync, None, 0, cost)
                core.matcher.add_unexpected(msg)
                core.wake.notify_locked()  # a probe may be waiting
                return
            else:
                core.fill(recv, rank, tag, payload if recv.buffer is not None else bytearray(payload))
                credit = stream.credit.consume(n + MESSAGE_COST)
        if flags & Flag.SYNC:
            self._sender.matched_sync(rank, seq)
        if credit:
            self._sender.control(rank, Kind.CREDIT, credit)
        if inbox is not None:
            inbox.run()

    def frame_finished(self, source: FrameAssembler, header: Header, payload: memoryview | None) -> None:
        if source.retired:
            return  # the rest of a batch read from a link that was just retired: the stream resends it
        rank = source.peer
        peer = self._core.peers[rank]
        stream = peer.stream
        kind = header.kind
        if header.ack > stream._acked_in:
            self.acknowledged(stream, header.ack)
        if kind in _SEQUENCED:
            if not stream.accept(header.seq, header.nbytes if kind is Kind.DATA else 0, header.flags):
                return  # a duplicate
            if header.flags & Flag.ACK_NOW and header.nbytes >= EARLY_ACK:
                # The sender waits for this large frame: acknowledge before waking the
                # receiver, so the ACK does not queue behind what the receiver sends next.
                self._sender.after_write(stream.send_ack(), [])
            elif source.via == "relay":
                self._touched.add(rank)  # acknowledged once the relay's whole read batch is in
            # (a TCP link's reader acknowledges after its batch: see ``Waiter.read_link_here``, ``Carriers.on_link_event``)
            if kind is Kind.DATA:
                self._deliver(rank, header)
            elif kind is Kind.RTS:
                self._announced(rank, header)
            elif kind is Kind.CTS:
                self._sender.send_payload(stream, header.context)
            elif kind is Kind.CREDIT:
                stream.credit.given_back(header.context)
            elif kind is Kind.MATCHED:
                op = stream.take_sync(header.context)
                if op is not None:
                    self._core.complete(op)
            else:  # BYE
                with self._core.lock:
                    peer.heard_bye = True
                    self._core.wake.notify_locked()
        elif kind is Kind.RESUME and source.via == "relay":
            self._on_resume(rank, header.ack)
        elif kind is Kind.PUNCH and source.via == "relay":
            self._on_punch(rank)
        elif kind is Kind.DIAGNOSE and source.via == "relay":
            self._on_diagnose(rank)

    def acknowledged(self, stream: Stream, upto: int) -> None:
        done, drained = stream.acknowledged(upto)
        if done or (drained and self._core.draining):
            with self._core.lock:
                for op in done:
                    self._core.complete_locked(op)
                self._core.wake.notify_locked()  # finalize waits for everything to be acknowledged

    def _deliver(self, rank: int, header: Header) -> None:
        core = self._core
        sync_seq = header.seq if header.flags & Flag.SYNC else None
        cost = header.nbytes + MESSAGE_COST
        if header.flags & Flag.RNDV:
            with core.lock:
                core.inflight.pop(rank, None)
                done = core.deliver_payload(rank, header.context, header.tag, header.nbytes, None)
            if done.__class__ is InboxRecv:
                done.inbox.run()  # type: ignore[union-attr]
            return
        inbox = None
        with core.lock:
            recv, dest = core.inflight.pop(rank, (None, bytearray()))
            if recv is not None:  # (matched when its header came: ``frame_started`` answered a SYNC then)
                sync_seq = None
                if recv.buffer is not None and header.nbytes <= len(recv.buffer):
                    core.finish_recv(recv, rank, header.tag, header.nbytes)
                else:
                    core.fill(recv, rank, header.tag, dest)
            else:
                recv = core.matcher.take_posted(header.context, rank, header.tag)
                if recv is None and core.inboxes and (inbox := core.inboxes.get(header.context)) is not None:
                    inbox.put(rank, header.tag, dest)
                elif recv is None:
                    core.matcher.add_unexpected(Arrived(header.context, rank, header.tag, dest, sync_seq, None, 0, cost))
                    core.wake.notify_locked()  # a probe may be waiting
                    return
                else:
                    core.fill(recv, rank, header.tag, dest)
            credit = core.peers[rank].stream.credit.consume(cost)
        self._sender.matched_sync(rank, sync_seq)
        if credit:
            self._sender.control(rank, Kind.CREDIT, credit)
        if inbox is not None:
            inbox.run()

    def _announced(self, rank: int, header: Header) -> None:
        """An RTS: a matching receive waits for the payload, which the CTS asks for; else the announcement
        waits in the unexpected queue, where probes see it with its size."""
        core = self._core
        with core.lock:
            recv = core.matcher.take_posted(header.context, rank, header.tag)
            if recv is None and core.inboxes and (inbox := core.inboxes.get(header.context)) is not None:
                recv = InboxRecv(header.context, rank, header.tag, None)  # (its place in the queue: inbox.py)
                recv.inbox = inbox
                inbox.put(rank, header.tag, recv)
            if recv is None:
                core.matcher.add_unexpected(
                    Arrived(header.context, rank, header.tag, None, None, announced=header.seq, nbytes=header.nbytes)
                )
                core.wake.notify_locked()  # a probe may be waiting
                return
            core.peers[rank].awaiting[header.seq] = recv
        self._sender.control(rank, Kind.CTS, header.seq)

    def after_reads(self) -> None:
        """After a batch of relay reads: acknowledge now, or arm the delayed-ACK timer (progress thread)."""
        touched, self._touched = self._touched, set()
        for rank in touched:
            self.ack(rank, from_timer=False)

    def ack(self, rank: int, from_timer: bool) -> None:
        """Send an ACK that is due now; else arm the delayed-ACK timer."""
        stream = self._core.peers[rank].stream
        if from_timer:
            stream.ack_timer = False
        due = stream.ack_due()
        if due == "now" or (due == "later" and from_timer):
            queued = stream.send_ack()
            if queued is not None:
                self._sender.want_write(queued)
        elif due == "later" and not stream.ack_timer:
            stream.ack_timer = True
            self._core.loop.call_later(self._core.options.ack_delay, lambda: self.ack(rank, from_timer=True))
