"""The transport's lookups of peers' records (``transport/links/directory.py``), against a fake relay.

The world names no peer: the first send to a peer parks it while a LOOKUP
goes out on the relay connection; the PEERS answer plans its route. Ranks
asked for together share a LOOKUP and none is asked twice; a rank the
rendezvous has no record of is relayed (auto), or fails with the reason
(a forced direct channel).
"""

from __future__ import annotations

import socket
import time

import pytest

from fmpi.transport.engine import Engine
from fmpi.transport.options import TransportOptions
from fmpi.transport.relay_channel import RelayChannel
from fmpi.transport.requests import TransportError
from fmpi.transport.routes import PeerAddress
from fmpi.wire.frame_reader import FrameReader
from fmpi.wire.relay_protocol import FORWARD_RANK, Kind, decode_body, encode, peers_answer

ME = ("127.0.0.1", 40000)


class Quiet:
    """The rank's session as the engine sees it: nothing to do here."""

    def relay_control(self, kind, body) -> None: ...
    def relay_lost(self, error) -> None: ...
    def link_event(self, info) -> None: ...


class FakeRelay:
    def __init__(self, channel: str) -> None:
        self.sock, theirs = socket.socketpair()
        self.sock.settimeout(5)
        self.reader = FrameReader()
        me = PeerAddress(0, (ME,), ME)
        self.engine = Engine(0, 8, b"s" * 32, None, None, options=TransportOptions(channel=channel), me=me)
        self.engine.attach_relay(RelayChannel(theirs), Quiet())

    def next(self, *kinds: Kind) -> tuple[Kind, bytes]:
        while True:
            while (frame := self.reader.next()) is not None:
                if frame[0] in kinds:
                    return frame[0], bytes(frame[1])
            data = self.sock.recv(1 << 16)
            assert data, "the engine closed its relay connection"
            self.reader.feed(data)

    def kinds_within(self, seconds: float) -> set[Kind]:
        """The kinds of the frames that came within `seconds` (heartbeats go on: a read never times out)."""
        kinds, end = set(), time.monotonic() + seconds
        while time.monotonic() < end:
            self.sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                break
            self.reader.feed(data)
            while (frame := self.reader.next()) is not None:
                kinds.add(frame[0])
        self.sock.settimeout(5)
        return kinds

    def lookups(self, want: int) -> list[list[int]]:
        asked: list[list[int]] = []
        while sum(map(len, asked)) < want:
            asked.append(decode_body(Kind.LOOKUP, self.next(Kind.LOOKUP)[1])["ranks"])
        return asked

    def close(self) -> None:
        self.engine.abandon()
        self.sock.close()


@pytest.fixture
def relay(request):
    fake = FakeRelay(getattr(request, "param", "auto"))
    yield fake
    fake.close()


def send(engine: Engine, dest: int):
    return engine.isend(dest, 0, 7, [memoryview(b"hello")])


def test_peers_are_looked_up_once_together_and_one_without_a_record_is_relayed(relay):
    ops = [send(relay.engine, dest) for dest in (1, 2, 3, 1, 2)]
    asked = relay.lookups(3)
    assert sorted(r for batch in asked for r in batch) == [1, 2, 3]  # (each once, however the batches fell)
    assert not ops[0].done  # parked until its record comes
    relay.sock.sendall(encode(Kind.PEERS, peers_answer([], {1: "rank 1 has not joined again", 2: "x", 3: "y"})))
    kind, body = relay.next(Kind.FORWARD)
    assert FORWARD_RANK.unpack_from(body)[0] in (1, 2, 3)  # (no record: the relay carries the pair)
    time.sleep(0.2)
    assert relay.engine.looked_up() == [1, 2, 3]
    send(relay.engine, 3)
    assert Kind.LOOKUP not in relay.kinds_within(1.0)  # known now: no second lookup


@pytest.mark.parametrize("relay", ["direct"], indirect=True)
def test_a_forced_direct_link_to_a_rank_without_a_record_fails_with_the_reason(relay):
    op = send(relay.engine, 5)
    assert relay.lookups(1) == [[5]]
    relay.sock.sendall(encode(Kind.PEERS, peers_answer([], {5: "rank 5 is outside job 'j' of 4 ranks"})))
    with pytest.raises(TransportError, match="cannot reach rank 5: rank 5 is outside job 'j' of 4 ranks"):
        relay.engine.wait(op, timeout=5)
