"""A fixed corpus of hostile inputs for every parser facing the network (the fuzzers' regression set)."""

import struct

import pytest
from fuzz_targets import TARGETS

from fmpi.transport.links.handshake import HELLO, MAGIC
from fmpi.wire.rank_frames import Kind as FrameKind
from fmpi.wire.rank_frames import pack_header
from fmpi.wire.relay_protocol import VERSION, Kind, encode

RELAY = [
    b"",
    b"\x01",
    encode(Kind.REGISTER, {"job": "j", "token": "t", "rank": 0, "incarnation": "i", "endpoints": [["h", 1]]}),
    encode(Kind.REGISTER, {"job": "j", "token": "t", "rank": 0, "incarnation": "i", "endpoints": [["h", "port"]]}),
    encode(Kind.REGISTER, {"job": "j", "token": "t", "rank": 0, "incarnation": "i", "endpoints": [[1, 2, 3]]}),
    encode(Kind.REGISTER, {"job": "j", "token": "t", "rank": 0, "incarnation": "i", "endpoints": "nope"}),
    encode(Kind.REGISTER, {"job": "j", "token": "t", "rank": True, "incarnation": "i", "endpoints": []}),
    struct.pack("!BBHI", VERSION, Kind.CREATE, 0, 4) + b"null",
    struct.pack("!BBHI", VERSION, Kind.CREATE, 0, 3) + b"\xff\xfe\xfd",
    struct.pack("!BBHI", VERSION, Kind.CREATE, 0, 2**32 - 1),
    struct.pack("!BBHI", 0, 0, 0, 0),
    struct.pack("!BBHI", VERSION, Kind.ABORT, 0, 27) + b'{"code": 1e999, "reason": 0}',
    struct.pack("!BBHI", VERSION, Kind.CREATE, 0, 40) + b'{"a":' * 8,
    struct.pack("!BBHI", VERSION, Kind.CREATE, 0, (1 << 20) - 1) + b"[" * ((1 << 20) - 1),  # RecursionError in json
    struct.pack("!BBHI", VERSION, Kind.CREATE, 0, 200_000) + b'{"a":' * 40_000,
]

LINK = [
    b"",
    b"\x00" * 35,
    pack_header(FrameKind.DATA, 0, 0, 0, 0, 0, 10) + b"short",
    pack_header(FrameKind.DATA, 0, 0, 0, 0, 0, 2**40),
    pack_header(FrameKind.ACK, 0, 0, 0, 0, 0, 5),
    bytes([77]) + pack_header(FrameKind.DATA, 0, 0, 0, 0, 0, 0)[1:],
    pack_header(FrameKind.DATA, 0, 3, 4, 5, 6, 3) + b"abc" + pack_header(FrameKind.BYE, 0, 0, 0, 0, 0, 0),
    (pack_header(FrameKind.DATA, 0, 1, 1, 0, 0, 0)) * 5000,
    pack_header(FrameKind.DATA, 0, 1, 1, 0, 0, 300_000) + b"x" * 300_000,
]

HELLOS = [
    b"",
    b"FMPI",
    HELLO.pack(MAGIC, 1, 0, 0, bytes(16), bytes(16))[:-1],
    HELLO.pack(b"XXXX", 1, 0, 0, bytes(16), bytes(16)),
    HELLO.pack(MAGIC, 999, 0, 0, bytes(16), bytes(16)),
    HELLO.pack(MAGIC, 1, -5, 7, bytes(16), bytes(16)),
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
]


@pytest.mark.parametrize("target, corpus", [("relay_frame", RELAY), ("link_stream", LINK), ("hello", HELLOS)])
def test_parsers_reject_hostile_input_with_their_own_errors(target, corpus):
    for data in corpus:
        TARGETS[target](data)  # any exception other than the parser's own error fails the test
