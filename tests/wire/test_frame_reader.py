"""The sans-IO frame reader: the same frames however the bytes arrive, nothing lost when it is handed over."""

from __future__ import annotations

import socket

import pytest

from fmpi.wire.frame_reader import FrameReader
from fmpi.wire.relay_protocol import (
    HEADER,
    HEADER_SIZE,
    VERSION,
    Kind,
    ProtocolError,
    decode_body,
    encode,
    forward_header,
)

STREAM = encode(Kind.WORLD, {"peers": []}) + forward_header(3, 5) + b"hello" + encode(Kind.HEARTBEAT) + forward_header(1, 70_000) + bytes(70_000)
EXPECTED = [(Kind.WORLD, 2 + len('"peers":[]')), (Kind.FORWARD, 9), (Kind.HEARTBEAT, 2), (Kind.FORWARD, 70_004)]


def _frames(reader: FrameReader) -> list[tuple[Kind, bytearray]]:
    out = []
    while (frame := reader.next()) is not None:
        out.append(frame)
    return out


@pytest.mark.parametrize("step", [1, 7, 4096, len(STREAM)])
def test_fed_in_any_pieces_the_frames_are_the_same(step):
    reader = FrameReader()
    got = []
    for i in range(0, len(STREAM), step):
        reader.feed(STREAM[i : i + step])
        got += _frames(reader)
    assert [(k, len(b)) for k, b in got] == EXPECTED
    assert decode_body(*got[0]) == {"peers": []} and got[1][1][4:] == b"hello"


def test_read_straight_into_its_buffer_over_a_real_socket():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(STREAM)
        a.shutdown(socket.SHUT_WR)
        reader, got = FrameReader(), []
        while True:
            with reader.buffer() as room:
                n = b.recv_into(room)
            if not n:
                break
            reader.advance(n)
            got += _frames(reader)
    assert [(k, len(b)) for k, b in got] == EXPECTED and reader.missing() == HEADER_SIZE  # (nothing of a next header)


def test_what_was_not_taken_is_handed_over_as_it_came():
    reader = FrameReader()
    cut = len(STREAM) - 100
    reader.feed(STREAM[:cut])
    assert reader.next()[0] is Kind.WORLD
    assert reader.take_rest() == STREAM[len(encode(Kind.WORLD, {"peers": []})) : cut]
    assert reader.next() is None and reader.take_rest() == b""


def test_a_bad_header_is_one_protocol_error_and_its_bytes_stay_visible():
    reader = FrameReader(limit=1000)
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        reader.feed(HEADER.pack(VERSION, Kind.FORWARD, 0, 1001))
    assert reader.head()[:2] == bytes([VERSION, Kind.FORWARD])
    with pytest.raises(ProtocolError, match="version"):
        FrameReader().feed(b"\x16\x03\x01\x02\x00\x01\x00\x00")
