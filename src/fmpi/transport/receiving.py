"""The receive half of ``Engine``: frames from any carrier become matched messages and acknowledgements.

An assembler (``assembler.py``) reports each frame of a pair's stream here,
whichever thread read it (the progress thread, or a thread waiting for a
message: ``waiting.py``) and whatever carried it (a TCP link, the relay).
The reader holds the pair stream's ``rx_lock``, so one pair's frames are
processed one at a time, in order.

* A DATA frame is matched when its header arrives: into a posted receive's
  buffer when one matches (large payloads are then read straight into it),
  else into a new buffer that waits in the unexpected queue. A small frame
  that arrived whole in one read takes a one-step path (``frame_whole``).
* Acknowledgements ride on every frame; ``_ack`` sends a bare one when due
  now, or arms the delayed-ACK timer.
"""

from __future__ import annotations

from _thread import get_ident

from ..wire.rank_frames import Flag, Header, Kind
from . import hang
from .assembler import FrameAssembler
from .requests import Arrived, RecvOp, TransportError
from .stream import Stream

# Frames at least this large that their sender waits on are acknowledged the
# moment they are in; smaller ones once the read batch is done (one ACK for many).
EARLY_ACK = 256 * 1024
_SYNC = int(Flag.SYNC)
_ACK_NOW = int(Flag.ACK_NOW)
_LANE = int(Flag.LANE)


class ReceivingMixin:
    """(It uses the engine's lock, peers, matcher, loop and options.)"""

    def frame_started(self, source: FrameAssembler, header: Header) -> memoryview | None:
        rank = source.peer
        if source.retired:
            return None
        stream = self._peers[rank].stream
        if header.ack > stream._acked_in:
            # Take the acknowledgement now rather than after a long payload: a
            # large send waiting for it completes sooner.
            self._acknowledged(stream, header.ack)
        if not stream.check_seq(header.seq):
            return None  # a duplicate (resent after a failover): discard its bytes
        with self._lock:
            recv = self._matcher.take_posted(header.context, rank, header.tag)
            dest: memoryview | bytearray
            if recv is not None and recv.buffer is not None and header.nbytes <= len(recv.buffer):
                dest = recv.buffer[: header.nbytes]
            else:
                dest = bytearray(header.nbytes)
            self._inflight[rank] = (recv, dest)
        if recv is not None and header.flags & _SYNC:
            self._matched_sync(rank, header.seq)
        return dest if isinstance(dest, memoryview) else memoryview(dest)

    def frame_whole(
        self, source: FrameAssembler, flags: int, tag: int, context: int, seq: int, ack: int, payload: memoryview
    ) -> None:
        """``frame_started`` + ``frame_finished`` in one step, for a DATA frame read whole."""
        if source.retired:
            return
        rank = source.peer
        stream = self._peers[rank].stream
        if ack > stream._acked_in:
            self._acknowledged(stream, ack)
        n = len(payload)
        if not stream.accept(seq, n, flags):
            return  # a duplicate
        if source.via == "relay":
            self._touched.add(rank)
        elif flags & _ACK_NOW and n >= EARLY_ACK:
            self._after_write(stream.send_ack(), [])
        with self._lock:
            recv = self._matcher.take_posted(context, rank, tag)
            if recv is None:
                sync = seq if flags & _SYNC else None
                if flags & _LANE:  # it waits in the lane for its receive: no copy now (``LaneReader.hold``)
                    msg = Arrived(context, rank, tag, payload, sync)
                    msg.lane = source.lane
                    msg.lane_token = source.lane.hold()  # type: ignore[union-attr]
                else:
                    msg = Arrived(context, rank, tag, bytearray(payload), sync)
                self._matcher.add_unexpected(msg)
                self._notify_locked()  # a probe may be waiting
                return
            buffer = recv.buffer
            if buffer is not None and n <= len(buffer):
                # (``_fill`` and ``_finish_recv`` inline, for their common case: once per message)
                buffer[:n] = payload
                recv.status_source = rank
                recv.status_tag = tag
                recv.nbytes = n
                recv.done = True
                reader = self._reader
                if self._sleepers or reader is not None and reader != get_ident():
                    self._notify_locked()  # (not when this thread reads for itself and nobody sleeps)
            else:
                self._fill(recv, rank, tag, payload if buffer is not None else bytearray(payload))
        if flags & _SYNC:
            self._matched_sync(rank, seq)

    def frame_finished(self, source: FrameAssembler, header: Header, payload: memoryview | None) -> None:
        if source.retired:
            return  # the rest of a batch read from a link that was just retired: the stream resends it
        rank = source.peer
        peer = self._peers[rank]
        stream = peer.stream
        kind = header.kind
        if header.ack > stream._acked_in:
            self._acknowledged(stream, header.ack)
        if kind is Kind.DATA or kind is Kind.MATCHED or kind is Kind.BYE:  # sequenced
            if not stream.accept(header.seq, header.nbytes, header.flags):
                return  # a duplicate
            if header.flags & _ACK_NOW and header.nbytes >= EARLY_ACK:
                # The sender waits for this large frame: acknowledge before waking the
                # receiver, so the ACK does not queue behind what the receiver sends next.
                self._after_write(stream.send_ack(), [])
            elif source.via == "relay":
                self._touched.add(rank)  # acknowledged once the relay's whole read batch is in
            # (a TCP link's reader acknowledges after its batch: see read_link_here, _on_link_event)
            if kind is Kind.DATA:
                self._deliver(rank, header)
            elif kind is Kind.MATCHED:
                op = stream.take_sync(header.context)
                if op is not None:
                    self._complete(op)
            else:  # BYE
                with self._lock:
                    peer.heard_bye = True
                    self._notify_locked()
        elif kind is Kind.RESUME and source.via == "relay":
            self._on_resume(rank, header.ack)
        elif kind is Kind.PUNCH and source.via == "relay":
            self._linker.on_punch_request(rank)
        elif kind is Kind.DIAGNOSE and source.via == "relay":
            hang.report(self.rank, self.waits.describe(), asker=rank)

    def _acknowledged(self, stream: Stream, upto: int) -> None:
        done, drained = stream.acknowledged(upto)
        if done or (drained and self._draining):
            with self._lock:
                for op in done:
                    self._complete_locked(op)
                self._notify_locked()  # finalize waits for everything to be acknowledged

    def _deliver(self, rank: int, header: Header) -> None:
        sync_seq = header.seq if header.flags & _SYNC else None
        with self._lock:
            recv, dest = self._inflight.pop(rank, (None, bytearray()))
            if recv is not None:
                if recv.buffer is not None and header.nbytes <= len(recv.buffer):
                    self._finish_recv(recv, rank, header.tag, header.nbytes)
                else:
                    self._fill(recv, rank, header.tag, dest)
                return
            recv = self._matcher.take_posted(header.context, rank, header.tag)
            if recv is None:
                self._matcher.add_unexpected(Arrived(header.context, rank, header.tag, dest, sync_seq))
                self._notify_locked()  # a probe may be waiting
                return
            self._fill(recv, rank, header.tag, dest)
        self._matched_sync(rank, sync_seq)

    def _take_arrived(self, recv: RecvOp, msg: Arrived) -> None:
        """Complete `recv` from a message of the unexpected queue (lock held)."""
        lane = msg.lane
        if lane is None:
            self._fill(recv, msg.source, msg.tag, msg.payload)
            return
        # Still in a shared-memory lane: copy it out once, then free its bytes in the ring.
        payload = msg.payload
        self._fill(recv, msg.source, msg.tag, payload if recv.buffer is not None else bytearray(payload))
        msg.lane = None
        lane.drop(msg.lane_token)
        payload.release()  # type: ignore[union-attr]

    def _fill(self, recv: RecvOp, source: int, tag: int, payload: bytearray | memoryview) -> None:
        """Complete `recv` from a whole payload (lock held)."""
        n = len(payload)
        if recv.buffer is None:
            recv.payload = payload
        elif n <= len(recv.buffer):
            recv.buffer[:n] = payload
        else:
            recv.error = TransportError(
                f"message truncated: {n} bytes from rank {source} (tag {tag}) do not fit a {len(recv.buffer)}-byte buffer",
                "ERR_TRUNCATE",
            )
        self._finish_recv(recv, source, tag, n)

    def _finish_recv(self, recv: RecvOp, source: int, tag: int, nbytes: int) -> None:
        recv.status_source = source
        recv.status_tag = tag
        recv.nbytes = nbytes
        recv.done = True  # (``_complete_locked`` inline: once per message)
        self._notify_locked()

    def _after_reads(self) -> None:
        """After a batch of relay reads: acknowledge now, or arm the delayed-ACK timer (progress thread)."""
        touched, self._touched = self._touched, set()
        for rank in touched:
            self._ack(rank, from_timer=False)

    def _ack(self, rank: int, from_timer: bool) -> None:
        """Send an ACK that is due now; else arm the delayed-ACK timer."""
        stream = self._peers[rank].stream
        if from_timer:
            stream.ack_timer = False
        due = stream.ack_due()
        if due == "now" or (due == "later" and from_timer):
            queued = stream.send_ack()
            if queued is not None:
                self._want_write(queued)
        elif due == "later" and not stream.ack_timer:
            stream.ack_timer = True
            self._loop.call_later(self.options.ack_delay, lambda: self._ack(rank, from_timer=True))
