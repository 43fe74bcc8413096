"""The one sans-IO reader of relay-protocol frames: bytes in, whole frames out.

Whoever owns the socket gives it bytes, either read already (``feed``) or
read straight into the reader (``recv_into`` its ``buffer()``, then
``advance``), and takes whole frames (``next``). The reader never touches
a socket, so every client-side reader of relay frames (the relay
connection of ranks and launchers, DSO node connections, the transport's
relay channel, the Redis and in-process bridges, the NAT probe) parses
them the same way, limits and errors included.

Each frame's body gets a buffer of its own, sized from its header, so a
large body read with ``buffer()``/``advance`` lands there without a copy.
"""

from __future__ import annotations

from collections import deque

from .relay_protocol import (
    HEADER,
    HEADER_SIZE,
    MAX_SERVER_FRAME,
    VERSION,
    Kind,
    decode_header,
)


class FrameReader:
    """Accumulates bytes; yields (kind, body) per whole frame. `limit`: the largest body accepted."""

    def __init__(self, limit: int = MAX_SERVER_FRAME) -> None:
        self.limit = limit
        self._ready: deque[tuple[Kind, bytearray]] = deque()
        self._reset()

    def _reset(self) -> None:
        self._head = bytearray(HEADER_SIZE)
        self._have = 0  # bytes of _head filled
        self._kind: Kind | None = None  # the frame whose body is being read (None: reading a header)
        self._body = bytearray()
        self._got = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Take bytes read from the socket (ProtocolError for a bad header: version, kind, over the limit)."""
        with memoryview(data) as view:
            pos = 0
            while pos < len(view):
                room = self.buffer()
                n = min(len(room), len(view) - pos)
                room[:n] = view[pos : pos + n]
                room.release()
                pos += n
                self.advance(n)

    def buffer(self) -> memoryview:
        """Where the next bytes go: the rest of the current header, or of the current body."""
        if self._kind is None:
            return memoryview(self._head)[self._have :]
        return memoryview(self._body)[self._got :]

    def advance(self, n: int) -> None:
        """`n` bytes were written into ``buffer()``."""
        if self._kind is None:
            self._have += n
            if self._have == HEADER_SIZE:
                self._kind, length = decode_header(self._head, self.limit)
                self._body, self._got = bytearray(length), 0
        else:
            self._got += n
        if self._kind is not None and self._got == len(self._body):
            self._ready.append((self._kind, self._body))
            self._reset()

    def next(self) -> tuple[Kind, bytearray] | None:
        """The next whole frame (its body is the caller's), or None until more bytes come."""
        return self._ready.popleft() if self._ready else None

    def missing(self) -> int:
        """Bytes that would complete the header or body being read (a read of this many never overshoots)."""
        return len(self._head) - self._have if self._kind is None else len(self._body) - self._got

    def head(self) -> bytes:
        """The header bytes read so far of the frame in progress: what a bad frame started with."""
        return bytes(self._head[: self._have]) if self._kind is None else bytes(self._head)

    def take_rest(self) -> bytes:
        """Every byte fed but not taken as a frame, as it came (handed over with the socket); the reader is empty
        after."""
        rest = bytearray()
        for kind, body in self._ready:
            rest += HEADER.pack(VERSION, kind, 0, len(body)) + body
        rest += self._head[: self._have] if self._kind is None else self._head + self._body[: self._got]
        self._ready.clear()
        self._reset()
        return bytes(rest)
