"""Parsers that face untrusted bytes, wrapped as fuzz targets.

Each target feeds arbitrary bytes to one parser and allows only that
parser's documented error; anything else (an IndexError, a KeyError, a hang)
is a bug. Used by the atheris run (fuzz_main.py, slow stage) and by the fixed
corpus in the default suite (test_fixed_corpus.py).
"""

from __future__ import annotations

import socket
import threading

from fmpi.transport.links.handshake import HandshakeError, read_hello
from fmpi.transport.links.link import Link, PeerClosed
from fmpi.wire.rank_frames import FrameError, Header
from fmpi.wire.relay_protocol import (
    HEADER_SIZE,
    MAX_CLIENT_FRAME,
    Kind,
    ProtocolError,
    decode_body,
    decode_header,
    parse_endpoints,
)

# The biggest payload the fuzzing sink will allocate for a frame; bigger ones are
# cut short by closing the connection, which the reader must handle cleanly.
SINK_LIMIT = 1 << 20


def relay_frame(data: bytes) -> None:
    """What the relay does with the first bytes of a connection."""
    if len(data) < HEADER_SIZE:
        return
    try:
        kind, length = decode_header(data[:HEADER_SIZE], MAX_CLIENT_FRAME)
        body = decode_body(kind, data[HEADER_SIZE : HEADER_SIZE + length])
        if kind is Kind.REGISTER:
            parse_endpoints(body["endpoints"])
    except ProtocolError:
        pass


class _Sink:
    def __init__(self) -> None:
        self.frames = 0

    def frame_started(self, link: Link, header: Header) -> memoryview:
        if header.nbytes > SINK_LIMIT:
            raise FrameError("frame larger than the fuzzing sink allows")
        return memoryview(bytearray(header.nbytes))

    def frame_finished(self, link: Link, header: Header, payload) -> None:
        self.frames += 1

    def frame_whole(self, link: Link, flags: int, tag: int, context: int, seq: int, ack: int, payload) -> None:
        self.frames += 1


def link_stream(data: bytes) -> None:
    """What a rank's link reader does with bytes from an (authenticated) peer."""
    a, b = socket.socketpair()
    writer = threading.Thread(target=_write_all, args=(a, data))
    writer.start()
    try:
        link = Link(1, b, _Sink())
        b.setblocking(True)  # each read waits for data; the writer's EOF ends the stream
        b.settimeout(5)
        try:
            while True:
                link.on_readable()
        except (PeerClosed, FrameError):
            pass
    finally:
        b.close()
        writer.join()
        a.close()


def _write_all(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the reader stopped early (a bad frame); that is its right


def hello(data: bytes) -> None:
    """What a rank's listener does with the first bytes of a connection."""
    a, b = socket.socketpair()
    try:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        b.settimeout(5)
        try:
            read_hello(b, 0)
        except HandshakeError:
            pass
        except OSError:
            pass  # the reply to a wrong-rank HELLO may fail to send once the peer is gone
    finally:
        a.close()
        b.close()


TARGETS = {"relay_frame": relay_frame, "link_stream": link_stream, "hello": hello}
