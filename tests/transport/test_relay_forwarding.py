"""fmpi-relay as the carrier of relayed links: FORWARD frames, flow control, bad and stuck clients.

Clients are raw sockets speaking the relay protocol, so the tests control
exactly what is sent and what is read.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from fmpi.relay_server.server import RelayThread
from fmpi.rendezvous.relay_connection import (
    RelayConnection,
    observe,
    probe_nat,
    register,
    wait_world,
)
from fmpi.wire.relay_protocol import (
    FORWARD_RANK,
    HEADER,
    MAX_CLIENT_FRAME,
    VERSION,
    Kind,
    forward_header,
)

TOKEN = "t" * 24


@pytest.fixture
def relay():
    r = RelayThread(
        "127.0.0.1", 0, forward_high_water=64 * 1024, forward_stall_timeout=1.0, lost_notice_delay=0.2
    )
    r.keep = []
    yield r
    for c in r.keep:
        c.close()
    r.stop()


def _url(relay) -> str:
    return "tcp://{}:{}".format(*relay.address)


def _job(relay, size: int, job: str = "fwd") -> list[RelayConnection]:
    watcher = RelayConnection(_url(relay))
    watcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": size, "fill_timeout": 10})
    watcher.expect(Kind.CREATED, 5)
    relay.keep.append(watcher)
    members = []
    for r in range(size):
        conn = RelayConnection(_url(relay))
        register(conn, job, TOKEN, r, f"i{r}", [("127.0.0.1", 4000 + r)], 5)
        members.append(conn)
    for conn in members:
        wait_world(conn, time.monotonic() + 5)
        conn.sock.settimeout(5)
    return members


def _forward(conn: RelayConnection, dest: int, data: bytes) -> None:
    conn.sock.sendall(forward_header(dest, len(data)) + data)


def _frame(conn: RelayConnection) -> tuple[Kind, bytes]:
    """The next frame the relay sent, heartbeats aside."""
    while True:
        kind, body = conn.next_frame()
        if kind != Kind.HEARTBEAT:
            return kind, bytes(body)


def test_forward_reaches_the_destination_stamped_with_the_true_sender(relay):
    a, b, c = _job(relay, 3)
    _forward(a, 2, b"to c")
    _forward(b, 2, b"also to c")
    got = {_frame(c)[1] for _ in range(2)}
    assert got == {FORWARD_RANK.pack(0) + b"to c", FORWARD_RANK.pack(1) + b"also to c"}


def test_chunks_of_one_stream_keep_their_order(relay):
    a, b = _job(relay, 2)
    chunks = [bytes([i]) * (1000 + i) for i in range(200)]
    for chunk in chunks:
        _forward(a, 1, chunk)
    assert [_frame(b)[1][4:] for _ in chunks] == chunks


def test_undeliverable_is_said_once_per_destination(relay):
    a, b = _job(relay, 2)
    _forward(a, 7, b"nobody")
    _forward(a, 7, b"nobody again")
    _forward(a, 0, b"myself")
    kind, body = _frame(a)
    assert kind is Kind.UNDELIVERABLE and json.loads(body)["rank"] == 7
    kind, body = _frame(a)
    assert kind is Kind.UNDELIVERABLE and json.loads(body) == {"rank": 0, "reason": "unknown", "message": "rank 0 is not a member of this job"}
    a.sock.settimeout(0.3)
    with pytest.raises(socket.timeout):
        _frame(a)


def test_a_lost_member_is_announced_and_forwards_to_it_are_refused(relay):
    a, b, c = _job(relay, 3)
    c.close()  # dies without finalizing
    kind, body = _frame(a)
    assert kind is Kind.PEER_LOST and json.loads(body) == {"rank": 2}
    _forward(a, 2, b"late")
    kind, body = _frame(a)
    assert kind is Kind.UNDELIVERABLE and json.loads(body)["reason"] == "lost"


def test_forward_is_only_for_members_of_a_published_world(relay):
    watcher = RelayConnection(_url(relay))
    watcher.send(Kind.CREATE, {"job": "early", "token": TOKEN, "size": 2, "fill_timeout": 10})
    watcher.expect(Kind.CREATED, 5)
    relay.keep.append(watcher)
    lonely = RelayConnection(_url(relay))
    register(lonely, "early", TOKEN, 0, "x", [("127.0.0.1", 1)], 5)
    _forward(lonely, 1, b"too soon")
    kind, body = _frame(lonely)
    assert kind is Kind.ERROR and "published" in json.loads(body)["message"]


def test_an_oversized_or_rankless_forward_closes_only_that_connection(relay):
    a, b = _job(relay, 2)
    a.sock.sendall(HEADER.pack(VERSION, Kind.FORWARD, 0, MAX_CLIENT_FRAME + 1))
    kind, body = _frame(a)
    assert kind is Kind.ERROR and "exceeds the limit" in json.loads(body)["message"]
    c, d = _job(relay, 2, job="other")
    c.sock.sendall(HEADER.pack(VERSION, Kind.FORWARD, 0, 2) + b"xy")
    kind, body = _frame(c)
    assert kind is Kind.ERROR and "without a rank" in json.loads(body)["message"]
    # b still works with a fresh job, and b itself was not hurt
    e, f = _job(relay, 2, job="third")
    _forward(e, 1, b"fine")
    assert _frame(f)[1] == FORWARD_RANK.pack(0) + b"fine"


def test_a_member_that_stops_reading_is_cut_off_and_memory_stays_bounded(relay):
    a, b, c = _job(relay, 3)
    job = relay.server.jobs["fwd"]
    stuck = job.members[1]
    chunk = bytes(32 * 1024)
    sent = [0]
    stop = threading.Event()

    def flood():  # b never reads: the relay must stop taking from a, not buffer without bound
        try:
            while not stop.is_set():
                _forward(a, 1, chunk)
                sent[0] += len(chunk)
        except OSError:
            pass

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    peak = 0
    deadline = time.monotonic() + 5
    while not (stuck.left or stuck.conn.writer.is_closing()):
        assert time.monotonic() < deadline, "the stuck member was not dropped"
        peak = max(peak, stuck.conn.backlog())
        time.sleep(0.005)
    sent_before_drop = sent[0]
    stop.set()
    flooder.join(10)
    # what the relay held for b stayed near the high-water mark (64 KiB here) ...
    assert peak <= 64 * 1024 + 2 * (len(chunk) + 16), peak
    # ... so a was held back too: only kernel socket buffers' worth got through before b was cut off
    assert sent_before_drop < 32 << 20, sent_before_drop
    # the others go on: c still gets a's frames
    _forward(a, 2, b"still here")
    while True:
        kind, body = _frame(c)
        if kind is Kind.FORWARD:
            assert body == FORWARD_RANK.pack(0) + b"still here"
            break


def test_observe_and_the_probe_port_report_the_source_address(relay):
    src = socket.socket()
    src.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    src.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    src.bind(("127.0.0.1", 0))
    port = src.getsockname()[1]
    conn = RelayConnection(_url(relay), sock=src)
    observed, probe_port = observe(conn, 5)
    assert observed == ("127.0.0.1", port) and probe_port == relay.server.probe_port
    second = socket.socket()
    second.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    second.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    second.bind(("127.0.0.1", port))
    assert probe_nat(_url(relay), probe_port, lambda: second) == (("127.0.0.1", port), "")
    conn.close()


def test_link_events_and_final_statistics_reach_the_launcher(relay):
    watcher = RelayConnection(_url(relay))
    watcher.send(Kind.CREATE, {"job": "stats", "token": TOKEN, "size": 2, "fill_timeout": 10})
    watcher.expect(Kind.CREATED, 5)
    relay.keep.append(watcher)
    members = []
    for r in range(2):
        conn = RelayConnection(_url(relay))
        register(conn, "stats", TOKEN, r, f"i{r}", [("127.0.0.1", 4000 + r)], 5)
        members.append(conn)
    members[0].send(Kind.LINK, {"peer": 1, "kind": "punched", "seconds": 0.01, "event": "up", "shared_memory": True})
    members[0].send(Kind.LINK, {"peer": 1, "kind": "sideways", "seconds": 0.01})  # unknown kinds are dropped
    members[1].send(Kind.FINISHED, {"code": 0, "links": [{"peer": 0, "kind": "punched", "seconds": 0.02, "shared_memory": "yes"}, "junk"]})
    events = []
    while len(events) < 2:
        body = watcher.expect(Kind.EVENT, 5)
        if body["type"] in ("link", "finished"):
            events.append(body)
    assert events[0] == {"type": "link", "rank": 0, "peer": 1, "kind": "punched", "seconds": 0.01, "event": "up", "shared_memory": True}
    # (only a real True counts as shared memory)
    assert events[1]["links"] == [{"peer": 0, "kind": "punched", "seconds": 0.02, "failovers": 0, "shared_memory": False}]
