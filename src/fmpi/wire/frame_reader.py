"""The one sans-IO reader of relay-protocol frames: bytes in, whole frames out.

Whoever owns the socket reads into it (``feed``, or ``recv_into`` the
``space`` it offers) and takes complete frames (``next``); the reader never
touches a socket, so every client-side reader of relay frames (the rank's
and the launcher's relay connection, DSO node connections, the Redis and
in-process bridges, the NAT probe) parses them the same way, limits and
errors included.
"""

from __future__ import annotations

from .relay_protocol import HEADER_SIZE, MAX_SERVER_FRAME, Kind, decode_header


class FrameReader:
    """Accumulates bytes; yields (kind, payload) per whole frame. `limit`: the largest payload accepted."""

    def __init__(self, limit: int = MAX_SERVER_FRAME) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._pos = 0  # start of the first unconsumed byte

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos:
            del self._buf[: self._pos]  # (consumed frames go once per read, not once per frame)
            self._pos = 0
        self._buf += data

    def next(self) -> tuple[Kind, bytes] | None:
        """The next whole frame, or None until more bytes come.

        ProtocolError for a bad header (version, kind, over the limit)."""
        have = len(self._buf) - self._pos
        if have < HEADER_SIZE:
            return None
        kind, length = decode_header(self._buf, self.limit, self._pos)
        if have < HEADER_SIZE + length:
            return None
        start = self._pos + HEADER_SIZE
        self._pos = start + length
        return kind, bytes(self._buf[start : self._pos])

    def missing(self) -> int:
        """Bytes still needed to complete the next frame (at least 1 when no whole frame is buffered)."""
        have = len(self._buf) - self._pos
        if have < HEADER_SIZE:
            return HEADER_SIZE - have
        _kind, length = decode_header(self._buf, self.limit, self._pos)
        return max(HEADER_SIZE + length - have, 0)

    def head(self) -> bytes:
        """The first unconsumed bytes (up to a header's worth): what a bad frame started with."""
        return bytes(self._buf[self._pos : self._pos + HEADER_SIZE])

    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def take_rest(self) -> bytes:
        """Every byte not consumed yet (handed over with the socket); the reader is empty after."""
        rest = bytes(self._buf[self._pos :])
        self._buf = bytearray()
        self._pos = 0
        return rest
