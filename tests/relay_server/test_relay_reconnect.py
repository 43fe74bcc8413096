"""A member whose connection breaks while fmpi-relay stays up is away for a while and may take its slot back.

Against a real ``fmpi-relay`` process (``--heartbeat-timeout 2 --reconnect-grace 2``): members
register as ranks do; one connection is reset (SO_LINGER 0), closed cleanly,
or left open while the same rank connects again.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
from typing import Any

import pytest
from tests_support import RelayProcess

from fmpi.rendezvous.relay_connection import RelayConnection, RelayError
from fmpi.wire.relay_protocol import FORWARD_RANK, Kind, decode_body, forward_header

TOKEN = "c" * 24
HEARTBEAT_TIMEOUT = 2.0
GRACE = 2.0
_ids = itertools.count()


@pytest.fixture(scope="module")
def relay():
    r = RelayProcess("--heartbeat-timeout", str(HEARTBEAT_TIMEOUT), "--reconnect-grace", str(GRACE))
    yield r
    r.stop()


def register_body(job: str, rank: int, beats: bool, **extra: Any) -> dict[str, Any]:
    return {"job": job, "token": TOKEN, "rank": rank, "incarnation": f"inc-{rank}",
            "endpoints": [["127.0.0.1", 5000 + rank]], "heartbeat": beats, **extra}


def start_job(relay, conns, size: int = 2, beating: tuple[int, ...] = (0,)) -> tuple[str, RelayConnection, list[RelayConnection]]:
    """A job whose world is out: (id, watcher, member connections). Members in `beating` said they send heartbeats."""
    job = f"reconnect-{next(_ids)}"
    watcher = RelayConnection(relay.url)
    conns.append(watcher)
    watcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": size, "fill_timeout": 10})
    watcher.expect(Kind.CREATED, 5)
    members = []
    for rank in range(size):
        conn = RelayConnection(relay.url)
        conns.append(conn)
        conn.send(Kind.REGISTER, register_body(job, rank, rank in beating))
        conn.expect(Kind.REGISTERED, 5)
        members.append(conn)
    for conn in members:
        conn.expect(Kind.WORLD, 5)
    while watcher.expect(Kind.EVENT, 5)["type"] != "world":
        pass
    return job, watcher, members


def reconnect(relay, conns, job: str, rank: int, **extra: Any) -> tuple[RelayConnection, dict[str, Any]]:
    conn = RelayConnection(relay.url)
    conns.append(conn)
    conn.send(Kind.REGISTER, register_body(job, rank, True, resume=True, observed=["198.51.100.1", 9], **extra))
    return conn, conn.expect(Kind.REGISTERED, 5)


def reset(conn: RelayConnection) -> None:
    """Beat, then close with a reset (what a cut connection looks like to the relay), not an orderly FIN."""
    conn.send(Kind.HEARTBEAT)
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.sock.close()


def frame(conn: RelayConnection, timeout: float) -> tuple[Kind, bytes]:
    """The next frame but heartbeats, undecoded (socket.timeout after `timeout` s)."""
    deadline = time.monotonic() + timeout
    while True:
        conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
        kind, body = conn.next_frame()
        if kind is not Kind.HEARTBEAT:
            return kind, bytes(body)


def quiet(conn: RelayConnection, seconds: float) -> bool:
    """Nothing but heartbeats arrives within `seconds`."""
    try:
        kind, body = frame(conn, seconds)
    except socket.timeout:
        return True
    raise AssertionError(f"unexpected {kind.name}: {body[:200]!r}")


def forward(conn: RelayConnection, dest: int, data: bytes) -> None:
    conn.sock.sendall(forward_header(dest, len(data)) + data)


def test_a_reset_member_is_away_not_lost_and_takes_its_slot_back(relay, conns):
    job, watcher, (a, b) = start_job(relay, conns)
    first_seen = list(a.sock.getsockname()[:2])
    reset(a)
    assert watcher.expect(Kind.EVENT, 5) == {"type": "away", "rank": 0, "within": GRACE}
    assert quiet(b, 0.5)  # no PEER_LOST: it may come back
    a2, registered = reconnect(relay, conns, job, 0)
    # (where the relay first saw it stays its address: peers punch to it)
    assert registered == {"rank": 0, "size": 2, "observed": first_seen, "reconnected": True}
    kind, body = frame(b, 5)
    assert kind is Kind.PEER_BACK and decode_body(kind, body) == {"rank": 0}
    event = watcher.expect(Kind.EVENT, 5)
    assert event["type"] == "rejoined" and event["reconnected"] is True and 0.5 < event["away"] < GRACE, event
    for _ in range(6):  # beating on its new connection, it stays
        a2.send(Kind.HEARTBEAT)
        time.sleep(HEARTBEAT_TIMEOUT / 4)
    a2.send(Kind.FINISHED, {"code": 0})
    assert watcher.expect(Kind.EVENT, 5) == {"type": "finished", "rank": 0, "code": 0}


def test_a_reconnected_rank_gets_a_fresh_stream_from_each_peer_after_its_resynced(relay, conns):
    job, watcher, (a, b) = start_job(relay, conns)
    forward(b, 0, b"before")  # (in flight when the connection breaks: lost)
    reset(a)
    watcher.expect(Kind.EVENT, 5)
    forward(b, 0, b"while away")  # dropped, not UNDELIVERABLE: it may come back
    a2, _ = reconnect(relay, conns, job, 0)
    kind, body = frame(b, 5)
    assert kind is Kind.PEER_BACK and decode_body(kind, body) == {"rank": 0}
    forward(b, 0, b"rest of an old frame")  # written before b read PEER_BACK: may continue a cut frame
    b.send(Kind.RESYNCED, {"rank": 0})
    forward(b, 0, b"fresh")
    kind, body = frame(a2, 5)
    assert kind is Kind.FORWARD and FORWARD_RANK.unpack_from(body)[0] == 1 and body[FORWARD_RANK.size :] == b"fresh"
    forward(a2, 1, b"from the reconnected rank")  # its own stream is fresh from the start
    kind, body = frame(b, 5)
    assert kind is Kind.FORWARD and body[FORWARD_RANK.size :] == b"from the reconnected rank"
    assert watcher.expect(Kind.EVENT, 5) | {"away": 0} == {"type": "rejoined", "rank": 0, "reconnected": True, "away": 0}
    assert quiet(a2, 0.3) and quiet(b, 0.1)


def test_a_member_away_past_its_grace_is_lost_and_cannot_come_back(relay, conns):
    job, watcher, (a, b) = start_job(relay, conns)
    reset(a)
    assert watcher.expect(Kind.EVENT, 5)["type"] == "away"
    lost = watcher.expect(Kind.EVENT, GRACE + 5)
    assert lost["type"] == "lost" and lost["rank"] == 0 and GRACE <= lost["away"] <= GRACE + 1, lost
    kind, body = frame(b, 5)
    assert kind is Kind.PEER_LOST and decode_body(kind, body)["rank"] == 0
    with pytest.raises(RelayError) as refused:
        reconnect(relay, conns, job, 0)
    assert refused.value.code == "gone" and "was counted as lost" in str(refused.value)


def test_a_member_that_closes_cleanly_is_lost_at_once(relay, conns):
    # (a process that exits sends FIN: no reason to wait for it)
    job, watcher, (a, b) = start_job(relay, conns)
    a.sock.setblocking(False)
    try:
        while a.sock.recv(65536):  # (what is left unread makes the kernel reset the connection instead)
            pass
    except BlockingIOError:
        pass
    a.close()
    assert watcher.expect(Kind.EVENT, 5) == {"type": "lost", "rank": 0}
    assert frame(b, 5)[0] is Kind.PEER_LOST


def test_a_reconnect_the_relay_did_not_see_coming_replaces_the_old_connection(relay, conns):
    # (a NAT that forgot the mapping: the rank got a reset, the relay heard nothing)
    job, watcher, (a, b) = start_job(relay, conns)
    a2, registered = reconnect(relay, conns, job, 0)
    assert registered["reconnected"] is True
    a.sock.settimeout(5)
    try:
        while a.sock.recv(65536):  # the relay ends the old one
            pass
    except ConnectionResetError:
        pass
    assert frame(b, 5)[0] is Kind.PEER_BACK
    assert watcher.expect(Kind.EVENT, 5)["type"] == "rejoined"
    assert quiet(watcher, 0.5)  # the old connection's end is not a loss


@pytest.mark.parametrize(
    "changes, code, words",
    [
        ({"incarnation": "impostor"}, "duplicate", ["rank 0", "'inc-0'", "'impostor'"]),
        ({"token": "x" * 24}, "auth", ["wrong token"]),
    ],
)
def test_a_reconnect_that_is_not_the_rank_itself_is_refused(relay, conns, changes, code, words):
    job, watcher, (a, b) = start_job(relay, conns)
    reset(a)
    with pytest.raises(RelayError) as refused:
        reconnect(relay, conns, job, 0, **changes)
    assert refused.value.code == code
    for word in words:
        assert word in str(refused.value)
    reconnect(relay, conns, job, 0)  # (the refusal took nothing)
