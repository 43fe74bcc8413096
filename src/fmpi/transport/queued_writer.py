"""Non-blocking writes of whole frames to one socket, for every carrier (TCP links and the relay).

The calling thread writes directly while the queue is empty; whatever the
kernel does not take is queued, and the progress thread finishes it when the
socket becomes writable (``flush``). A write error is kept in ``failed``
rather than raised, so a sending thread never sees it: its frame stays queued
and the progress thread fails the carrier over.

A TLS socket (the rank's connection to a ``tls://`` relay; TCP links never
use TLS) has no ``sendmsg``: ``_write_tls`` writes it piece by piece instead,
under the same rules. Everything else is shared.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections import deque

from ..util.byteparts import advance_parts


class QueuedWriter:
    __slots__ = ("sock", "wlock", "_queue", "failed", "bytes_out", "tls")

    def _init_writer(self, sock: socket.socket) -> None:
        self.sock = sock
        self.wlock = threading.Lock()
        self._queue: deque[tuple[list[memoryview], object | None]] = deque()
        self.failed: OSError | None = None
        self.bytes_out = 0
        self.tls = isinstance(sock, ssl.SSLSocket)

    def write_held(self, parts: list[memoryview], token: object | None) -> bool:
        """Write one frame (caller holds ``wlock``): True when it went out whole, False when (part of) it is queued.

        On False the caller must ask the progress thread to wait for write
        readiness, and gets `token` back from ``flush`` later.
        """
        if not self._queue:
            parts = self._write(parts)
            if not parts:
                return True
        self._queue.append((parts, token))
        return False

    def flush(self) -> tuple[list[object], bool]:
        """Progress-thread side: (tokens of frames now fully out, queue empty). Raises ``_lost`` on a broken socket."""
        done: list[object] = []
        with self.wlock:
            while self._queue:
                parts, token = self._queue[0]
                rest = self._write(parts)
                if self.failed is not None:
                    raise self._lost(self.failed)
                if rest:
                    self._queue[0] = (rest, token)
                    return done, False
                self._queue.popleft()
                if token is not None:
                    done.append(token)
            return done, True

    def has_queued(self) -> bool:
        return bool(self._queue)

    def _lost(self, error: OSError) -> Exception:
        """The exception ``flush`` raises for a write error (carriers name their own)."""
        return error

    def _write(self, parts: list[memoryview]) -> list[memoryview]:
        """sendmsg until the kernel stops taking bytes; return what is left."""
        if self.failed is not None:
            return parts
        if self.tls:
            return self._write_tls(parts)
        left = sum(map(len, parts))
        while parts:
            try:
                n = self.sock.sendmsg(parts)
            except (BlockingIOError, InterruptedError):
                return parts
            except OSError as exc:
                self.failed = exc
                return parts
            self.bytes_out += n
            left -= n
            if not left:
                return []
            parts = advance_parts(parts, n)
        return parts

    def _write_tls(self, parts: list[memoryview]) -> list[memoryview]:
        """``_write`` for an SSLSocket (caller holds ``wlock``, which also keeps reads out of OpenSSL meanwhile).

        One SSL_write per piece; small leading parts are joined into one
        piece (one TLS record, not one per header). SSL_write takes a piece
        whole or raises SSLWantWrite/ReadError, and then must be retried
        with the same bytes: the piece is a function of the frame's parts
        alone, and those stay queued unchanged until written.
        """
        while parts:
            piece = _tls_piece(parts)
            try:
                n = self.sock.send(piece)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return parts
            except OSError as exc:
                self.failed = exc
                return parts
            self.bytes_out += n
            parts = advance_parts(parts, n)
        return parts


TLS_JOIN = 16 * 1024  # leading parts joined into one TLS write up to this size (one TLS record holds 16 KiB)


def _tls_piece(parts: list[memoryview]) -> memoryview | bytes:
    """The next piece to hand SSL_write: parts[0], or the leading small parts joined (deterministic)."""
    total, i = len(parts[0]), 1
    while i < len(parts) and total + len(parts[i]) <= TLS_JOIN:
        total += len(parts[i])
        i += 1
    return parts[0] if i == 1 else b"".join(parts[:i])
