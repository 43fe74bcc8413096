"""One established, authenticated TCP connection to one peer rank.

Reading is a small state machine driven by the progress thread: bytes land in
a staging buffer (so a burst of small frames costs one syscall), headers are
parsed there, and a payload is copied into the destination the receiver chose
at header time. Once the staging buffer is empty, the rest of a large payload
is read straight into its destination with ``recv_into`` — no intermediate
copy, which is what lets a 64 MiB ``Recv`` run at socket speed.

Writing uses ``sendmsg`` with the header and the payload as separate parts
(scatter/gather, no concatenation). The calling thread writes directly while
the link's queue is empty; whatever the kernel does not take is queued and
finished by the progress thread when the socket becomes writable.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from typing import Protocol

from .frames import HEADER_SIZE, Flag, FrameError, Header, Kind, pack_header, unpack_header

STAGE_SIZE = 256 * 1024
# Below this many outstanding payload bytes we keep going through the stage;
# above it a direct recv_into the destination saves a copy.
DIRECT_READ_THRESHOLD = 64 * 1024



class FrameSink(Protocol):
    """What a link reports to: the progress engine."""

    def frame_started(self, link: "Link", header: Header) -> memoryview | None:
        """A DATA header arrived; return where its payload goes (len == nbytes)."""

    def frame_finished(self, link: "Link", header: Header, payload: memoryview | None) -> None:
        """A whole frame arrived (payload already written to the destination)."""


class PeerClosed(Exception):
    """The peer closed the connection (EOF)."""


class Link:
    __slots__ = (
        "peer",
        "sock",
        "_sink",
        "_stage",
        "_view",
        "_lo",
        "_hi",
        "_header",
        "_dest",
        "_dest_off",
        "_wlock",
        "_queue",
        "_sync",
        "send_seq",
        "said_bye",
        "heard_bye",
        "bytes_in",
        "bytes_out",
    )

    def __init__(self, peer: int, sock: socket.socket, sink: FrameSink) -> None:
        self.peer = peer
        self.sock = sock
        sock.setblocking(False)
        self._sink = sink
        self._stage = bytearray(STAGE_SIZE)
        self._view = memoryview(self._stage)
        self._lo = 0
        self._hi = 0
        self._header: Header | None = None
        self._dest: memoryview | None = None
        self._dest_off = 0
        self._wlock = threading.Lock()
        self._queue: deque[tuple[list[memoryview], object | None]] = deque()
        self._sync: dict[int, object] = {}
        self.send_seq = 0
        self.said_bye = False
        self.heard_bye = False
        self.bytes_in = 0
        self.bytes_out = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    # ------------------------------------------------------------------ read
    def on_readable(self) -> None:
        """Read what the kernel has; raises PeerClosed on EOF, OSError/FrameError on failure."""
        sock = self.sock
        while True:
            header = self._header
            if header is not None and self._lo == self._hi:
                remaining = header.nbytes - self._dest_off
                if remaining >= DIRECT_READ_THRESHOLD:
                    try:
                        n = sock.recv_into(self._dest[self._dest_off :], remaining)
                    except (BlockingIOError, InterruptedError):
                        return
                    if n == 0:
                        raise PeerClosed()
                    self.bytes_in += n
                    self._dest_off += n
                    if self._dest_off == header.nbytes:
                        self._finish_payload()
                    if n < remaining:
                        return
                    continue
            if self._lo == self._hi:
                self._lo = self._hi = 0
            elif self._hi > STAGE_SIZE - HEADER_SIZE:
                # Keep a partial header contiguous by moving the tail to the front.
                tail = self._hi - self._lo
                self._view[:tail] = self._view[self._lo : self._hi]
                self._lo, self._hi = 0, tail
            want = STAGE_SIZE - self._hi
            try:
                n = sock.recv_into(self._view[self._hi :], want)
            except (BlockingIOError, InterruptedError):
                return
            if n == 0:
                raise PeerClosed()
            self.bytes_in += n
            self._hi += n
            self._consume_stage()
            if n < want:
                return

    def _consume_stage(self) -> None:
        view = self._view
        while self._lo < self._hi:
            header = self._header
            if header is None:
                if self._hi - self._lo < HEADER_SIZE:
                    return
                header = unpack_header(view, self._lo)
                self._lo += HEADER_SIZE
                if header.kind is not Kind.DATA:
                    self._sink.frame_finished(self, header, None)
                    continue
                self._header = header
                self._dest_off = 0
                self._dest = self._sink.frame_started(self, header) if header.nbytes else None
                if header.nbytes == 0:
                    self._finish_payload()
                continue
            take = min(header.nbytes - self._dest_off, self._hi - self._lo)
            self._dest[self._dest_off : self._dest_off + take] = view[self._lo : self._lo + take]
            self._lo += take
            self._dest_off += take
            if self._dest_off == header.nbytes:
                self._finish_payload()

    def _finish_payload(self) -> None:
        header, dest = self._header, self._dest
        self._header = None
        self._dest = None
        self._sink.frame_finished(self, header, dest)

    # ----------------------------------------------------------------- write
    # A queued entry is (frame parts, op): `op` is an opaque token handed back
    # by flush() once the frame is fully written (None for control frames).

    def send_data(
        self, context: int, source: int, tag: int, parts: list[memoryview], nbytes: int, op: object, sync: bool
    ) -> bool:
        """Frame and write a message; whatever the kernel does not take now is queued.

        Sequence numbers are assigned under the write lock, so they follow wire
        order. A synchronous send registers `op` under its seq before the frame
        can reach the peer, so the peer's ACK always finds it.

        Returns True when the frame went out whole (the caller completes a
        non-synchronous op itself), False when it is queued: the caller must
        then ask the progress thread to wait for write readiness.
        """
        with self._wlock:
            seq = self.send_seq
            self.send_seq = seq + 1
            flags = Flag.NONE
            if sync:
                self._sync[seq] = op
                flags = Flag.SYNC
            frame = [memoryview(pack_header(Kind.DATA, flags, source, tag, context, seq, nbytes)), *parts]
            return self._send_locked(frame, None if sync else op)

    def send_control(self, kind: Kind, seq: int = 0) -> bool:
        """ACK or BYE; same queueing rules as ``send_data``."""
        with self._wlock:
            return self._send_locked([memoryview(pack_header(kind, 0, 0, 0, 0, seq, 0))], None)

    def take_sync(self, seq: int) -> object | None:
        with self._wlock:
            return self._sync.pop(seq, None)

    def _send_locked(self, frame: list[memoryview], op: object | None) -> bool:
        if not self._queue:
            frame = self._write(frame)
            if not frame:
                return True
        self._queue.append((frame, op))
        return False

    def flush(self) -> tuple[list[object], bool]:
        """Progress-thread side of writing: returns (ops whose frames are now out, queue empty)."""
        done: list[object] = []
        with self._wlock:
            while self._queue:
                parts, op = self._queue[0]
                rest = self._write(parts)
                if rest:
                    self._queue[0] = (rest, op)
                    return done, False
                self._queue.popleft()
                if op is not None:
                    done.append(op)
            return done, True

    def has_queued(self) -> bool:
        return bool(self._queue)

    def abandon(self) -> list[object]:
        """The link is dead: hand back the ops of unsent frames and of unacknowledged sync sends."""
        with self._wlock:
            ops = [op for _, op in self._queue if op is not None]
            self._queue.clear()
            ops.extend(self._sync.values())
            self._sync.clear()
            return ops

    def _write(self, parts: list[memoryview]) -> list[memoryview]:
        """sendmsg until the kernel stops taking bytes; return what is left."""
        while parts:
            try:
                n = self.sock.sendmsg(parts)
            except (BlockingIOError, InterruptedError):
                return parts
            self.bytes_out += n
            parts = _advance(parts, n)
        return parts


def _advance(parts: list[memoryview], n: int) -> list[memoryview]:
    i = 0
    while i < len(parts) and n >= len(parts[i]):
        n -= len(parts[i])
        i += 1
    rest = parts[i:]
    if rest and n:
        rest[0] = rest[0][n:]
    return rest


__all__ = ["Link", "FrameSink", "PeerClosed", "FrameError", "STAGE_SIZE"]
