"""The rank's line to fmpi-relay while the job runs (a ``RelayLine`` over a socket): control frames, relayed links.

After the world is published, the rank's relay connection carries:

* control frames both ways (JSON): aborts, job failures, a peer lost, a
  FORWARD that could not be delivered, the rank's link reports and output;
* FORWARD frames (binary): the byte streams of the pairs that go through
  the relay. A relayed pair's fmpi frames are written exactly as on a TCP
  link, then cut into chunks of at most ``chunk`` bytes, each prefixed with
  the destination rank. The payload is never copied on the way out:
  chunks are views of the user's buffers, written with ``sendmsg``.

Writing follows the rules of a TCP link (``link.Outbox``-style): the calling
thread writes while the queue is empty, the progress thread finishes the
rest. Reading is done by the progress thread only.

Over a ``tls://`` relay the socket is an SSLSocket: writes go through
``QueuedWriter._write_tls``, reads take ``wlock`` (OpenSSL must not read and
write one connection from two threads at once), a read that would block
raises SSLWantReadError rather than BlockingIOError, and decrypted bytes
OpenSSL still holds (``pending()``) are read at once, since epoll cannot
see them. A plain TCP relay connection takes none of these paths.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from typing import Any

from ..util.byteparts import take_parts
from ..wire.frame_reader import FrameReader
from ..wire.relay_protocol import (
    FORWARD_RANK,
    Kind,
    ProtocolError,
    decode_body,
    encode,
    forward_header,
)
from .queued_writer import QueuedWriter
from .relay_line import OnControl, OnForward

READ_SIZE = 256 * 1024


class RelayLost(Exception):
    """The relay connection closed or broke."""


class RelayChannel(QueuedWriter):
    """The ``RelayLine`` over a socket speaking the fmpi-relay protocol."""

    def __init__(self, sock: socket.socket, *, leftover: bytes = b"", chunk: int = 256 * 1024) -> None:
        self._init_writer(sock)
        sock.setblocking(False)
        self._on_forward: OnForward = _unbound
        self._on_control: OnControl = _unbound
        self._chunk = chunk
        self._reader = FrameReader()
        self._reader.feed(leftover)
        self.bytes_in = 0
        self.last_heard = time.monotonic()  # when the relay last sent anything
        self.beats_heard = False  # the relay sends heartbeats (so its silence means trouble)
        self.lost = False

    def bind(self, on_forward: OnForward, on_control: OnControl) -> None:
        self._on_forward, self._on_control = on_forward, on_control

    def fileno(self) -> int:
        return self.sock.fileno()

    # ------------------------------------------------------------------ read
    def on_readable(self) -> None:
        """Read and dispatch what arrived; raises RelayLost (or ProtocolError) when the relay is gone."""
        while True:
            more = False
            try:
                if self.tls:
                    with self.wlock:
                        data = self.sock.recv(READ_SIZE)
                        more = self.sock.pending() > 0
                else:
                    data = self.sock.recv(READ_SIZE)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError as exc:
                raise RelayLost(str(exc)) from None
            if not data:
                raise RelayLost("the relay closed the connection")
            self.bytes_in += len(data)
            self.last_heard = time.monotonic()
            self._reader.feed(data)
            self._dispatch()
            if len(data) < READ_SIZE and not more:
                return

    def _dispatch(self) -> None:
        while (frame := self._reader.next()) is not None:
            kind, body = frame
            if kind is Kind.FORWARD:
                if len(body) < FORWARD_RANK.size:
                    raise ProtocolError("FORWARD frame without a rank")
                (src,) = FORWARD_RANK.unpack_from(body)
                with memoryview(body)[FORWARD_RANK.size :] as chunk:
                    self._on_forward(src, chunk)
            else:
                self._on_control(kind, decode_body(kind, body))

    # ----------------------------------------------------------------- write
    def forward(self, dest: int, parts: list[memoryview], token: object | None) -> bool:
        """Send one fmpi frame (header + payload parts) to rank `dest` through the relay.

        Returns True when it all went to the kernel now; otherwise the rest
        is queued and `token` comes back from ``flush`` once written.
        """
        frames = self._chunks(dest, parts)
        with self.wlock:
            return self._forward_frames(frames, token)

    def forward_held(self, dest: int, parts: list[memoryview], token: object | None) -> bool:
        """``forward`` for a caller that already holds ``wlock``."""
        return self._forward_frames(self._chunks(dest, parts), token)

    def _forward_frames(self, frames: list[list[memoryview]], token: object | None) -> bool:
        written = True
        for i, frame in enumerate(frames):
            if not self.write_held(frame, token if i == len(frames) - 1 else None):
                written = False
        return written

    def _chunks(self, dest: int, parts: list[memoryview]) -> list[list[memoryview]]:
        frames = []
        total = sum(len(p) for p in parts)
        while total > 0 or not frames:
            n = min(total, self._chunk)
            piece, parts = take_parts(parts, n)
            frames.append([memoryview(forward_header(dest, n)), *piece])
            total -= n
        return frames

    def send_control(self, kind: Kind, body: dict[str, Any] | None = None) -> bool:
        with self.wlock:
            return self.write_held([memoryview(encode(kind, body))], None)

    def _lost(self, error: OSError) -> Exception:
        return RelayLost(str(error))

    def drain(self, timeout: float) -> bool:
        """Block until everything queued is written (for use when no progress thread runs)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                _, empty = self.flush()
            except RelayLost:
                return False
            if empty:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                select.select([], [self.sock], [], remaining)
            except (OSError, ValueError):
                return False

    def close_gracefully(self, timeout: float = 2.0) -> None:
        """After the last frame: flush, half-close, and wait (bounded) for the relay to close its side.

        Closing with unread bytes in the receive queue would make the kernel
        reset the connection, which could overtake our last frames.
        """
        deadline = time.monotonic() + timeout
        try:
            if self.drain(timeout):
                self.sock.shutdown(socket.SHUT_WR)
                while time.monotonic() < deadline:
                    ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
                    if not ready:
                        break
                    try:
                        if not self.sock.recv(READ_SIZE):
                            break
                    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        continue
        except (OSError, ValueError):
            pass
        finally:
            self.sock.close()


def _unbound(*_args: object) -> None:
    raise RuntimeError("a relay line read before its events were bound")
