"""Rank-to-rank frame header: the only thing that precedes a payload on a link.

A frame is a fixed 36-byte little-endian header followed by ``nbytes`` of
payload. The payload is raw bytes (a numpy buffer, or a pickle stream with
out-of-band buffers built by the API layer); the transport never interprets it.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

# kind u8, flags u8, reserved u16, source i32, tag i32, context u64, seq u64, nbytes u64
HEADER = struct.Struct("<BBHiiQQQ")
HEADER_SIZE = HEADER.size

# A single message may be at most this large. It bounds what a corrupt or
# hostile header can make a receiver allocate.
MAX_PAYLOAD = 1 << 40


class Kind(enum.IntEnum):
    DATA = 1  # a message; payload follows
    ACK = 2  # receiver matched the synchronous send whose seq is in `seq`
    BYE = 3  # sender finalized; the link closes after this frame


class Flag(enum.IntFlag):
    NONE = 0
    SYNC = 1  # synchronous send: the receiver answers with ACK when matched


class FrameError(Exception):
    """A peer sent bytes that are not a valid frame."""


@dataclass(slots=True)
class Header:
    kind: Kind
    flags: int
    source: int
    tag: int
    context: int
    seq: int
    nbytes: int

    def pack(self) -> bytes:
        return HEADER.pack(self.kind, self.flags, 0, self.source, self.tag, self.context, self.seq, self.nbytes)


def pack_header(kind: Kind, flags: int, source: int, tag: int, context: int, seq: int, nbytes: int) -> bytes:
    return HEADER.pack(kind, flags, 0, source, tag, context, seq, nbytes)


def unpack_header(data: bytes | bytearray | memoryview, offset: int = 0) -> Header:
    kind, flags, _reserved, source, tag, context, seq, nbytes = HEADER.unpack_from(data, offset)
    try:
        kind = Kind(kind)
    except ValueError:
        raise FrameError(f"unknown frame kind {kind}") from None
    if nbytes > MAX_PAYLOAD:
        raise FrameError(f"frame length {nbytes} exceeds the limit of {MAX_PAYLOAD} bytes")
    if kind is not Kind.DATA and nbytes:
        raise FrameError(f"{kind.name} frame must not carry a payload (got {nbytes} bytes)")
    return Header(kind, flags, source, tag, context, seq, nbytes)
