"""Rank-to-rank frame header: the only thing that precedes a payload on a link.

A frame is a fixed 44-byte little-endian header followed by ``nbytes`` of
payload. The payload is raw bytes (a numpy buffer, or a pickle stream with
out-of-band buffers built by the API layer); the transport never interprets it.

Every pair of ranks shares one ordered, reliable stream of frames per
direction, whatever carries it (a TCP connection, the relay, or first one and
then the other after a failover). DATA, MATCHED and BYE frames are
*sequenced*: each takes the next ``seq`` of its direction, and the receiver
drops a sequenced frame it has already seen (RTS, CTS and CREDIT, the
flow-control frames, are sequenced too). Every frame carries in ``ack``
the sender's cumulative acknowledgement of the other direction ("I hold all
your sequenced frames below this number"), so acknowledgements ride on
traffic for free; a bare ACK frame is sent only when there is none.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

# kind u8, flags u8, reserved u16, source i32, tag i32, context u64, seq u64, nbytes u64, ack u64
HEADER = struct.Struct("<BBHiiQQQQ")
HEADER_SIZE = HEADER.size

# A single message may be at most this large. It bounds what a corrupt or
# hostile header can make a receiver allocate.
MAX_PAYLOAD = 1 << 40


class Kind(enum.IntEnum):
    DATA = 1  # a message; payload follows (sequenced)
    ACK = 2  # only the cumulative `ack` field matters (not sequenced)
    BYE = 3  # sender finalized; it sends nothing more (sequenced)
    MATCHED = 4  # receiver matched the synchronous send whose seq is in `context` (sequenced)
    RESUME = 5  # via the relay: "I now carry this pair through the relay; resend from `ack`"
    PUNCH = 6  # via the relay: "I need a link to you: punch towards me now"
    DIAGNOSE = 7  # via the relay: "print what you are waiting for" (hang diagnosis, hang.py)
    # Flow control (transport/stream.py): a large message, or one past the receiver's credit, is announced
    # and its payload moves once a receive matches it (rendezvous).
    RTS = 8  # "a message of `nbytes` is ready" (sequenced; no payload follows: `nbytes` is the announced size)
    CTS = 9  # "the announcement whose seq is in `context` matched a receive: send its payload" (sequenced)
    CREDIT = 10  # "I have taken your early messages worth `context` bytes in all" (sequenced, cumulative)


_KINDS: dict[int, Kind] = {int(k): k for k in Kind}  # a dict lookup is ~10x cheaper than Kind(k)


class Flag:
    """The header's flag bits: plain ints (a header's flags are an int, tested once per frame)."""

    SYNC = 1  # synchronous send: the receiver answers with MATCHED when it is matched
    ACK_NOW = 2  # the sender waits for this frame's acknowledgement: acknowledge at once
    LANE = 4  # the payload is not on the link but next in its shared-memory lane (shm_lane.py)
    RNDV = 8  # a DATA frame that is the payload of the announcement (RTS) whose seq is in `context`


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
    ack: int = 0

    def pack(self) -> bytes:
        return HEADER.pack(self.kind, self.flags, 0, self.source, self.tag, self.context, self.seq, self.nbytes, self.ack)


def pack_header(
    kind: Kind, flags: int, source: int, tag: int, context: int, seq: int, nbytes: int, ack: int = 0
) -> bytes:
    return HEADER.pack(kind, flags, 0, source, tag, context, seq, nbytes, ack)


def unpack_header(data: bytes | bytearray | memoryview, offset: int = 0) -> Header:
    return parse_header(*HEADER.unpack_from(data, offset))


def parse_header(
    number: int, flags: int, _reserved: int, source: int, tag: int, context: int, seq: int, nbytes: int, ack: int
) -> Header:
    """A header from the fields ``HEADER`` unpacked, checked."""
    kind = _KINDS.get(number)
    if kind is None:
        raise FrameError(f"unknown frame kind {number}")
    if nbytes > MAX_PAYLOAD:
        raise FrameError(f"frame length {nbytes} exceeds the limit of {MAX_PAYLOAD} bytes")
    if kind is not Kind.DATA and kind is not Kind.RTS and nbytes:
        raise FrameError(f"{kind.name} frame must not carry a payload (got {nbytes} bytes)")
    return Header(kind, flags, source, tag, context, seq, nbytes, ack)
