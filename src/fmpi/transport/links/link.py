"""One established, authenticated TCP connection to one peer rank: a carrier of that pair's frames.

Reading is done by the progress thread, or by a thread waiting for a
message from this peer (see ``waiting.py``): bytes land in a staging buffer (so
a burst of small frames costs one syscall) and go to the link's
``FrameAssembler``; once the staging buffer is empty, the rest of a large
payload is read straight into its destination with ``recv_into`` (no
intermediate copy, which is what lets a 64 MiB ``Recv`` run at socket speed).

Writing uses ``sendmsg`` with the header and the payload as separate parts
(scatter/gather, no concatenation). The calling thread writes directly while
the link's queue is empty; whatever the kernel does not take is queued and
finished by the progress thread when the socket becomes writable. Sequence
numbers, acknowledgements and retransmission live one level up (``stream``):
a link only moves bytes, so the pair's stream can move to another carrier
(the relay) when the connection dies.

Between ranks on the same host, a link also has a shared-memory lane per
direction (``shm_lane.py``): the stream puts the payload of a large frame
into the outgoing one and sends the header alone, flagged ``LANE``; the
assembler takes such a payload from the incoming one.

Liveness: a connection whose path silently stops delivering (a NAT mapping
dropped, a firewall rule) would otherwise look healthy for many minutes. The
kernel is told to give up after ``timeout`` seconds without acknowledgement
(TCP_USER_TIMEOUT) and to probe idle connections (keepalive), so such a link
fails with ETIMEDOUT and the engine fails it over to the relay.
"""

from __future__ import annotations

import select
import socket

from ...wire.rank_frames import HEADER_SIZE
from ..assembler import FrameAssembler, FrameSink
from ..queued_writer import QueuedWriter
from .shm_lane import LaneReader, LaneWriter

# A read between frames goes to the stage; it must be small, because whatever
# part of a large payload it takes is copied once more. 32 KiB still holds
# hundreds of small frames (one syscall for a burst of them).
STAGE_SIZE = 32 * 1024
# From this many outstanding payload bytes on, the rest of a payload is read
# straight into its destination (recv_into), not through the stage.
DIRECT_READ_THRESHOLD = 32 * 1024


class PeerClosed(Exception):
    """The peer closed the connection (EOF)."""


def set_liveness(sock: socket.socket, timeout: float) -> None:
    """Make a silently dead path fail within about `timeout` seconds (best effort per platform)."""
    ms = max(1000, int(timeout * 1000))
    idle = max(1, int(timeout / 3))
    for level, name, value in (
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", idle),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", max(1, int(timeout) - idle)),
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", ms),
    ):
        opt = getattr(socket, name, None)
        if opt is not None:
            try:
                sock.setsockopt(level, opt, value)
            except OSError:
                pass


class Link(QueuedWriter):
    """A TCP carrier. ``write`` may be called from any thread; ``on_readable`` by one thread at a
    time, the holder of the pair stream's ``rx_lock`` (the progress thread or a waiting thread)."""

    __slots__ = (
        "peer", "kind", "asm", "retired", "_stage", "_view", "bytes_in", "read_failure", "idle_since", "_wait_poll",
        "lane_out",
    )

    def __init__(self, peer: int, sock: socket.socket, sink: FrameSink, kind: str = "direct") -> None:
        self.peer = peer
        self._init_writer(sock)
        self.kind = kind  # how it was made: "direct" or "punched"
        sock.setblocking(False)
        self.asm = FrameAssembler(peer, "tcp", sink)
        # It carries nothing more (``retire``). A plain field, not a property over the assembler's
        # own flag: readers check it several times per message.
        self.retired = False
        self._stage = bytearray(STAGE_SIZE)
        self._view = memoryview(self._stage)
        self.bytes_in = 0
        # A read by a waiting thread failed (EOF, reset, bad frame): the progress
        # thread, which owns the link's life cycle, handles it.
        self.read_failure: BaseException | None = None
        self.idle_since = 0.0  # when the last waiting thread stopped reading it (waiting.py)
        self._wait_poll: tuple[int, object] | None = None
        self.lane_out: LaneWriter | None = None

    def retire(self) -> None:
        """The pair moved on (failover, or the link is being dropped): frames still read from it are ignored."""
        self.retired = True
        self.asm.retired = True

    def add_lanes(self, out: LaneWriter, into: LaneReader) -> None:
        """The peer shares this host: large payloads travel through shared memory (before any traffic)."""
        self.lane_out = out
        self.asm.lane = into

    def close_lanes(self) -> None:
        """Remove our lane's file if the peer never opened it (the engine stops)."""
        if self.lane_out is not None:
            self.lane_out.close()

    def fileno(self) -> int:
        return self.sock.fileno()

    # ------------------------------------------------------------------ read
    def on_readable(self, ack_only: bool = False) -> None:
        """Read what the kernel has; raises PeerClosed on EOF, OSError/FrameError on failure.

        `ack_only`: the caller waits for nothing but an acknowledgement (a
        bare header), so between frames read one header's worth and stop.
        A full stage would also take the start of whatever follows, often
        the peer's next large message, before any receive is posted for it:
        it would go to a fresh buffer (page faults, and one more copy later)
        instead of straight into the receive's buffer once it is posted.
        """
        sock, asm = self.sock, self.asm
        while True:
            # (in the middle of a payload: a large rest goes straight to its destination)
            target = None if asm.dest is None else asm.direct_target(DIRECT_READ_THRESHOLD)
            if target is not None:
                want = len(target)
                try:
                    n = sock.recv_into(target, want)
                except (BlockingIOError, InterruptedError):
                    return
                finally:
                    target.release()
                if n == 0:
                    raise PeerClosed()
                self.bytes_in += n
                asm.advance(n)
                # Either way, stop: with n < want the kernel has no more; with the large
                # payload complete, what follows may be the peer's next large message,
                # before any receive is posted for it (a root running ahead in a bcast).
                # Read now, it would go into a fresh buffer and be copied again later;
                # left in the kernel until the caller reads again, it lands in its
                # receive's buffer if one is posted by then.
                return
            want = HEADER_SIZE if ack_only and not asm.in_frame() else STAGE_SIZE
            try:
                n = sock.recv_into(self._view, want)
            except (BlockingIOError, InterruptedError):
                return
            if n == 0:
                raise PeerClosed()
            self.bytes_in += n
            asm.feed(self._view, n)
            if n < STAGE_SIZE or asm.retired:
                return

    def wait_poller(self, bell: int) -> tuple[object, dict[int, "Link"]]:
        """A ``select.poll`` on this link and `bell`, kept for the next wait (saves building it per message)."""
        fd = self.sock.fileno()
        if fd < 0:  # closed under the waiter (failover): only the bell is left to wait on
            poller = select.poll()
            poller.register(bell, select.POLLIN)
            return poller, {}
        if self._wait_poll is None or self._wait_poll[0] != bell:
            poller = select.poll()
            poller.register(bell, select.POLLIN)
            poller.register(fd, select.POLLIN)
            self._wait_poll = (bell, poller)
        return self._wait_poll[1], {fd: self}

    # ----------------------------------------------------------------- write
    def write(self, parts: list[memoryview], token: object | None) -> bool:
        """Write one frame; whatever the kernel does not take now is queued.

        Returns True when the frame went out whole, False when (part of) it
        is queued: the caller must then ask the progress thread to wait for
        write readiness, and gets `token` back from ``flush`` later.
        """
        with self.wlock:
            return self.write_held(parts, token)

    def flush(self) -> tuple[list[object], bool]:
        if self.failed is not None:  # a sender hit the error first; fail over even with nothing queued
            raise self.failed
        return super().flush()

    def drop_queue(self) -> None:
        """The link is being abandoned: forget unsent bytes (the stream resends what matters)."""
        with self.wlock:
            self._queue.clear()


__all__ = ["Link", "PeerClosed", "STAGE_SIZE", "set_liveness"]
