"""One pair's reliable, ordered frame stream, independent of what carries it.

Each direction of a pair is numbered: every sequenced frame (DATA, MATCHED,
BYE, and flow control's RTS, CTS, CREDIT: ``flow.py``) takes the next ``seq``,
and stays in ``unacked`` until the peer's cumulative acknowledgement covers it. The carrier under the stream (a TCP
link, the relay) may change: when a link dies, the engine detaches it, the
two sides exchange RESUME through the relay (each says what it holds), and
``attach`` resends everything from that point on the new carrier. The
receiver drops any sequenced frame whose seq it has seen, so a resent frame
is never delivered twice, and nothing is lost or reordered.

What is kept for resending (the trade-off):

* a message of at most ``copy_limit`` bytes (256 KiB) is copied once, into
  a recycled buffer (``copy_pool.py``); its send completes as soon as the frame is written;
* a larger message is *not* copied: the stream keeps a reference to the
  user's buffer, and the send completes when the peer acknowledges it (the
  frame asks for an immediate ACK), so no extra copy of large payloads exists;
* a message sent by rendezvous (``flow.py``) waits in ``rndv`` for the
  peer's CTS, then goes as any other;
* a synchronous send keeps its reference and completes on MATCHED, which
  implies receipt;
* a message of at least ``LANE_MIN`` bytes to a rank on the same host, sent
  while the link is up, is copied into the link's shared-memory lane
  (``shm_lane.py``) and only its header goes over the link. The copy in the
  lane is also the one kept for resending, so such a send completes as soon
  as it is written, whatever its size. That is safe because the reader
  frees lane space only after the stream has recorded the frame as received
  (a resend of it is then dropped as a duplicate), and never on a retired
  link.

Acknowledgements ride in the ``ack`` field of every frame going the other
way; a bare ACK goes out only when a frame asked for one, when ``ack_every``
frames or ``ack_bytes`` are unacknowledged, or after ``ack_delay`` (``ack_due``).

Locking: ``lock`` guards both directions' counters; the send side is called
from any thread. The receive side runs under ``rx_lock``, held by whoever
reads the pair's carrier (the progress thread, or a thread waiting for a
message from this peer), so frames are processed one at a time and in
order even when the carrier changes under a reader. Lock order: ``rx_lock``,
then the engine lock, then ``lock``, then the carrier's write lock.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Protocol

from ..wire.rank_frames import HEADER, Flag, FrameError, Kind, pack_header
from .copy_pool import POOL_MIN, CopyPool
from .flow import Credit
from .links.shm_lane import LANE_MIN
from .requests import SendOp, TransportError

_pack = HEADER.pack  # (``pack_header`` without its Python frame, on the per-message path)


_NOTHING: tuple[list[SendOp], bool] = ([], False)
_NO_PARTS: list[memoryview] = []


class Carrier(Protocol):
    wlock: threading.Lock

    def write(self, parts: list[memoryview], token: object | None) -> bool:
        """Write one frame; True when all of it went out now, False when part is queued."""

    def write_held(self, parts: list[memoryview], token: object | None) -> bool:
        """``write`` with ``wlock`` already held by the caller."""


class Stream:
    def __init__(
        self,
        me: int,
        peer: int,
        *,
        copy_limit: int = 256 * 1024,
        ack_window: int = 4 << 20,
        ack_every: int = 32,
        ack_bytes: int = 1 << 20,
        eager_limit: int = 1 << 20,
        credit: int = 128 << 20,
    ) -> None:
        self.me = me
        self.peer = peer
        self.lock = threading.Lock()
        self.rx_lock = threading.Lock()
        self._copy_limit = copy_limit
        self._ack_window = ack_window
        self._ack_every = ack_every
        self._ack_bytes = ack_bytes
        # send side
        self.next_seq = 0
        self.unacked: deque[SendOp] = deque()  # sent or held frames, in seq order (each its op: requests.py)
        self.next_unsent = 0
        self.carrier: Carrier | None = None
        self.sync: dict[int, SendOp] = {}
        self.failed: TransportError | None = None
        self._copied_unacked = 0
        self._acked_in = 0  # the highest acknowledgement seen from the peer
        self._copies = CopyPool(ack_window)  # the buffers of copied messages, recycled
        self.credit = Credit(eager_limit, credit)  # flow control (flow.py)
        self.rndv: dict[int, SendOp] = {}  # announced sends waiting for the peer's CTS, by their RTS's seq
        # receive side
        self.recv_next = 0
        self.acked_out = 0
        self._rx_bytes = 0
        self._ack_asap = False
        self.ack_timer = False

    # ================================================================ sending
    def push_data(self, op: SendOp, tag: int, context: int, parts: list[memoryview]) -> tuple[Carrier | None, bool]:
        """Add the message of `op` (``op.nbytes`` bytes in `parts`) and write it if a carrier is attached.

        Returns (a carrier that kept part of the frame queued, or None;
        whether `op` is complete now). A small message completes as soon as
        it is copied and written; a failed stream completes `op` with its
        error at once. A message above the eager limit, or past the peer's
        credit, is only announced (RTS): its payload follows the peer's CTS
        (``push_payload``).
        """
        self.lock.acquire()
        if self.failed is None and not self.credit.eager(op.nbytes):
            return self._announce(op, tag, context, parts)
        return self._push(op, tag, context, parts, 0)

    def push_payload(self, op: SendOp) -> tuple[Carrier | None, bool]:
        """The peer matched the announcement of `op` (its CTS): send the payload, flagged RNDV, naming the
        announcement's seq in `context`. As ``push_data``; the receive is matched, so a synchronous send
        completes as any other."""
        self.lock.acquire()
        op.sync = False
        return self._push(op, op.tag, op.seq, op.parts, Flag.RNDV)

    def _announce(self, op: SendOp, tag: int, context: int, parts: list[memoryview]) -> tuple[Carrier | None, bool]:
        """(lock held; ``_push`` releases it) Send an RTS for `op`, which waits in ``rndv`` for the CTS."""
        op.announced = True
        op.tag = tag
        op.context = context
        op.parts = parts
        op.seq = self.next_seq
        self.rndv[op.seq] = op
        rts = SendOp.control(self.peer, Kind.RTS)
        rts.nbytes = op.nbytes  # (the header's size field announces it; no payload follows)
        return self._push(rts, tag, context, _NO_PARTS, 0)[0], False

    def _push(
        self, op: SendOp, tag: int, context: int, parts: list[memoryview], extra: int
    ) -> tuple[Carrier | None, bool]:
        """(lock held: released here) Give `op` the next seq, keep it for resending and write its frame
        (see ``push_data``; `extra`: flags to add)."""
        try:
            if self.failed is not None:
                if not self.discards(op):
                    op.error = self.failed
                return None, True
            seq = self.next_seq
            self.next_seq = seq + 1
            carrier = self.carrier
            nbytes = op.nbytes
            flags = copied = 0
            on_write = True  # (else the op completes on ACK or MATCHED)
            laned = None
            if parts and nbytes >= LANE_MIN and carrier is not None and self.next_unsent == seq:  # (RTS: no parts)
                lane = getattr(carrier, "lane_out", None)
                if lane is not None:
                    laned = lane.place(parts, nbytes)  # (None: no room, it goes inline)
            if op.sync:
                flags = Flag.SYNC
                on_write = False
                self.sync[seq] = op
            elif laned is not None:
                parts = [laned]
            elif nbytes <= self._copy_limit or not parts:
                if parts and nbytes:
                    # (below POOL_MIN the copy is plain bytes: the pool is for the larger ones)
                    parts = [b"".join(parts) if nbytes < POOL_MIN else self._copies.copy(parts, nbytes)]
                    copied = nbytes
                    self._copied_unacked += nbytes
                    if self._copied_unacked > self._ack_window:
                        flags = Flag.ACK_NOW
            else:
                flags = Flag.ACK_NOW
                on_write = False
            flags |= extra
            op.seq = seq
            op.flags = flags
            op.tag = tag
            op.context = context
            op.parts = parts
            op.on_write = on_write
            op.copied = copied
            self.unacked.append(op)
            if carrier is None or self.next_unsent != seq:
                return None, False  # (``attach`` writes it, or it waits behind frames not yet written)
            self.next_unsent = seq + 1
            ack = self._take_ack()
            if laned is None:
                frame = [_pack(op.kind, flags, 0, self.me, tag, context, seq, nbytes, ack), *parts]
            else:  # the payload is in the lane; a resend (``_frame``) carries it inline
                frame = [_pack(op.kind, flags | Flag.LANE, 0, self.me, tag, context, seq, nbytes, ack)]
            # Hand over hand: take the carrier's write lock before letting go of
            # ours, so frames still go out in seq order, but acknowledgements
            # (which need only our lock) are not held up by a long sendmsg.
            wlock = carrier.wlock
            wlock.acquire()
        finally:
            self.lock.release()
        try:
            written = carrier.write_held(frame, op)
        finally:
            wlock.release()
        return (None, on_write) if written else (carrier, False)

    def push_control(self, kind: Kind, context: int = 0) -> Carrier | None:
        """Add a sequenced frame without payload (MATCHED, BYE, CTS, CREDIT) and write it if a carrier is
        attached; returns the carrier if it kept part of the frame queued."""
        self.lock.acquire()
        return self._push(SendOp.control(self.peer, kind), 0, context, _NO_PARTS, 0)[0]

    def control(self, kind: Kind) -> list[memoryview]:
        """An unsequenced frame (RESUME, PUNCH) carrying our cumulative ack; the caller writes it."""
        with self.lock:
            return [memoryview(pack_header(kind, 0, self.me, 0, 0, 0, 0, self._take_ack()))]

    def attach(self, carrier: Carrier, resume_from: int | None = None) -> tuple[Carrier | None, list[SendOp]]:
        """Carry the stream on `carrier` from now on, writing every frame not yet sent on it.

        `resume_from`: the peer holds all frames below it (its RESUME), so
        resend from there; None for a first carrier (send what was held).
        """
        with self.lock:
            done = self._drop_acked(resume_from) if resume_from is not None else []
            start = self.next_unsent if resume_from is None else resume_from
            self.carrier = carrier
            queued = None
            for entry in self.unacked:
                if entry.seq < start:
                    continue
                if not carrier.write(self._frame(entry), entry):
                    queued = carrier
                elif entry.on_write:
                    done.append(entry)
            self.next_unsent = self.next_seq
            return queued, done

    def detach(self) -> None:
        """Stop writing (the carrier died or is being replaced): frames are held until ``attach``."""
        with self.lock:
            self.carrier = None

    def acknowledged(self, upto: int) -> tuple[list[SendOp], bool]:
        """The peer holds every frame below `upto`: forget them.

        Returns (ops completed by that, whether nothing is left unacknowledged
        now after something was): the engine wakes finalize for the latter.
        """
        if upto <= self._acked_in:
            return _NOTHING  # the same cumulative value again (it rides on every frame)
        with self.lock:
            self._acked_in = upto
            before = len(self.unacked)
            done = self._drop_acked(upto)
            return done, before > 0 and not self.unacked

    def discards(self, op: SendOp) -> bool:
        """An eager standard-mode send to a peer that finalized completes, discarded, as MPI libraries' eager
        sends do (erroneous in MPI, but zeus's pool stops its finalized workers so at exit)."""
        return (op.kind is Kind.DATA and not op.sync and op.nbytes <= self.credit.eager_limit
                and self.failed is not None and self.failed.error_class == "ERR_PEER_FINALIZED")

    def fail(self, error: TransportError) -> list[SendOp]:
        """No carrier will ever take this stream again: every op still waiting on it fails."""
        with self.lock:
            self.failed = error
            self.carrier = None
            ops = list(self.unacked)
            ops += self.sync.values()
            ops += self.rndv.values()
            self.unacked.clear()
            self.sync.clear()
            self.rndv.clear()
            # (the engine, holding its lock, skips ops already completed on write)
            return list({id(op): op for op in ops}.values())

    def pending(self) -> bool:
        """Frames not yet acknowledged (or not even sent), or announced payloads not yet asked for."""
        return bool(self.unacked) or bool(self.rndv)

    def take_rndv(self, rts_seq: int) -> SendOp | None:
        """The announced send that the peer's CTS for `rts_seq` asks for."""
        with self.lock:
            op = self.rndv.pop(rts_seq, None)
        if op is not None:
            op.announced = False  # (its receive is posted: it waits for nothing but its payload's ACK now)
        return op

    def take_sync(self, seq: int) -> SendOp | None:
        with self.lock:
            return self.sync.pop(seq, None)

    def _drop_acked(self, upto: int) -> list[SendOp]:
        if upto > self.next_seq:
            upto = self.next_seq
        done = []
        unacked = self.unacked
        while unacked and unacked[0].seq < upto:
            op = unacked.popleft()
            copied = op.copied
            if copied:
                self._copied_unacked -= copied
                if copied >= POOL_MIN:  # (smaller copies are bytes, nothing to recycle)
                    self._copies.recycle(op.parts[0])
            op.parts = _NO_PARTS  # (a Request may outlive this: let go of the sender's buffer)
            # (an op completed on write is usually done already: skip it cheaply)
            if not op.done and not op.flags & Flag.SYNC:
                done.append(op)
        return done

    def _frame(self, entry: SendOp) -> list[memoryview]:
        header = pack_header(entry.kind, entry.flags, self.me, entry.tag, entry.context, entry.seq, entry.nbytes, self._take_ack())
        return [memoryview(header), *entry.parts]

    def _take_ack(self) -> int:
        ack = self.recv_next
        if ack > self.acked_out:
            self.acked_out = ack
            self._rx_bytes = 0
            self._ack_asap = False
        return ack

    # ============================================================== receiving
    def check_seq(self, seq: int) -> bool:
        """(rx_lock held) True for the next expected frame, False for a duplicate; raises on a gap."""
        if seq == self.recv_next:
            return True
        if seq < self.recv_next:
            return False
        raise FrameError(f"rank {self.peer} skipped frames: got seq {seq}, expected {self.recv_next}")

    # The receive side runs under rx_lock, not lock: only its holder advances
    # recv_next; a sender that piggybacks an ACK meanwhile resets the
    # counters below from a value read a moment earlier. The worst such a race
    # does is one ACK sent late (the delayed-ACK timer still fires) or twice.

    def accept(self, seq: int, nbytes: int, flags: int) -> bool:
        """(rx_lock held) A sequenced frame arrived whole: record it if it is the expected one.

        False for a duplicate (drop it); raises on a gap, as ``check_seq``.
        """
        expected = self.recv_next
        if seq != expected:
            return self.check_seq(seq)  # (False for a duplicate; raises on a gap)
        self.recv_next = expected + 1
        self._rx_bytes += nbytes
        if flags & Flag.ACK_NOW:
            self._ack_asap = True
        return True

    def ack_due(self) -> str | None:
        """"now", "later" (arm the delayed-ACK timer) or None (nothing unacknowledged)."""
        pending = self.recv_next - self.acked_out
        if pending <= 0:
            return None
        if self._ack_asap or pending >= self._ack_every or self._rx_bytes >= self._ack_bytes:
            return "now"
        return "later"

    def send_ack(self) -> Carrier | None:
        """Write a bare ACK on the current carrier; returns the carrier if it had to queue it."""
        with self.lock:
            carrier = self.carrier
            if carrier is None or self.recv_next <= self.acked_out:
                return None
            header = pack_header(Kind.ACK, 0, self.me, 0, 0, 0, 0, self._take_ack())
            return None if carrier.write([memoryview(header)], None) else carrier
