"""fmpi-relay's name table (MPI name publishing): its rules, its bounds, and what strangers can do to it.

A real relay (``RelayThread``) and real sockets: the rank's client
(``FmpiRelayNames``), and raw frames for the malformed requests.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from fmpi import rendezvous
from fmpi.relay_server.server import RelayThread
from fmpi.rendezvous.fmpi_relay import FmpiRelayNames
from fmpi.rendezvous.relay_connection import RelayConnection, RelayError
from fmpi.rank.spawn import Quiet  # (a job's events nobody needs)
from fmpi.wire.names import MAX_NAME
from fmpi.wire.relay_protocol import HEADER, VERSION, Kind, encode

TOKEN = "n" * 24



@pytest.fixture
def relay():
    r = RelayThread("127.0.0.1", 0, first_frame_timeout=1.0, max_names=3, max_names_per_job=2)
    r.watchers = []
    yield r
    for conn in r.watchers:
        conn.close()
    r.stop()


def url(relay) -> str:
    return "tcp://{}:{}".format(*relay.address)


def create(relay, job: str) -> RelayConnection:
    """A job at the relay, alive while the returned launcher connection is open."""
    conn = RelayConnection(url(relay))
    conn.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": 2, "fill_timeout": 60.0})
    conn.expect(Kind.CREATED, 5)
    relay.watchers.append(conn)
    return conn


def names(relay, job: str, token: str = TOKEN) -> FmpiRelayNames:
    return FmpiRelayNames(url(relay), job, token)


def refusal(call) -> str:
    with pytest.raises(RelayError) as caught:
        call()
    return caught.value.code


def raw_request(relay, frame: bytes) -> tuple[int, dict] | None:
    """Send `frame` on a new connection: the relay's one answer (kind, body), or None if it just closed."""
    with socket.create_connection(relay.address, timeout=5) as s:
        s.sendall(frame)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data:
        return None
    _v, kind, _r, length = HEADER.unpack(data[:HEADER.size])
    return kind, json.loads(data[HEADER.size:HEADER.size + length])


def test_publish_lookup_unpublish(relay):
    create(relay, "a")
    create(relay, "b")
    names(relay, "a").publish("svc", "fmpi-port:1:secret")
    assert names(relay, "b").lookup("svc") == "fmpi-port:1:secret"  # (another job sharing the relay sees it)
    assert refusal(lambda: names(relay, "b").publish("svc", "fmpi-port:2:other")) == "name_taken"
    assert refusal(lambda: names(relay, "a").publish("svc", "fmpi-port:1:secret")) == "name_taken"
    assert refusal(lambda: names(relay, "b").unpublish("svc", "fmpi-port:2:other")) == "name_port"
    assert names(relay, "a").lookup("svc") == "fmpi-port:1:secret"  # (a wrong port withdrew nothing)
    names(relay, "b").unpublish("svc", "fmpi-port:1:secret")  # (the port is the proof, whoever holds it)
    assert refusal(lambda: names(relay, "a").lookup("svc")) == "name_unknown"
    assert refusal(lambda: names(relay, "a").unpublish("svc", "fmpi-port:1:secret")) == "name_unknown"
    names(relay, "b").publish("svc", "fmpi-port:3:again")  # (free again)
    assert names(relay, "a").lookup("svc") == "fmpi-port:3:again"


def test_only_a_live_job_with_its_token_uses_the_names(relay):
    create(relay, "a")
    names(relay, "a").publish("svc", "p")
    assert refusal(lambda: names(relay, "a", token="x" * 24).lookup("svc")) == "auth"
    assert refusal(lambda: names(relay, "nosuch").lookup("svc")) == "unknown_job"
    assert refusal(lambda: names(relay, "nosuch").publish("other", "p")) == "unknown_job"


def test_the_table_is_bounded_per_job_and_in_all(relay):
    create(relay, "a")
    create(relay, "b")
    names(relay, "a").publish("a1", "p")
    names(relay, "a").publish("a2", "p")
    assert refusal(lambda: names(relay, "a").publish("a3", "p")) == "names_full"  # (2 per job)
    names(relay, "b").publish("b1", "p")
    with pytest.raises(RelayError) as full:
        names(relay, "b").publish("b2", "p")  # (3 in all)
    assert full.value.code == "names_full" and "at most 3 names" in str(full.value)
    names(relay, "a").unpublish("a1", "p")
    names(relay, "b").publish("b2", "p")
    assert relay.server.names.lookup("b2") == "p" and len(relay.server.names) == 3


def test_names_go_with_the_job_that_published_them(relay):
    launcher = create(relay, "a")
    create(relay, "b")
    names(relay, "a").publish("svc", "p")
    names(relay, "a").publish("svc2", "p")
    names(relay, "b").publish("keep", "q")
    launcher.send(Kind.END, {"job": "a"})
    deadline = time.monotonic() + 5
    while len(relay.server.names) > 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert refusal(lambda: names(relay, "b").lookup("svc")) == "name_unknown"
    assert names(relay, "b").lookup("keep") == "q"
    relay.watchers[1].close()  # (a launcher that hangs up ends its job too)
    create(relay, "c")
    deadline = time.monotonic() + 5
    while len(relay.server.names) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert refusal(lambda: names(relay, "c").lookup("keep")) == "name_unknown"


def test_bad_names_are_refused(relay):
    create(relay, "a")
    assert refusal(lambda: names(relay, "a").publish("", "p")) == "bad_name"
    assert refusal(lambda: names(relay, "a").publish("x" * (MAX_NAME + 1), "p")) == "bad_name"
    assert refusal(lambda: names(relay, "a").publish("svc", "")) == "bad_name"
    assert refusal(lambda: names(relay, "a").lookup("x" * (MAX_NAME + 1))) == "bad_name"
    names(relay, "a").publish("x" * MAX_NAME, "p")
    assert names(relay, "a").lookup("x" * MAX_NAME) == "p"


@pytest.mark.parametrize("frame", [
    encode(Kind.NAME_PUBLISH, {"job": "a", "token": TOKEN, "name": "svc"}),  # no port
    encode(Kind.NAME_LOOKUP, {"job": "a", "token": TOKEN, "name": 7}),  # a name that is no string
    encode(Kind.NAME_UNPUBLISH, {"job": ["a"], "token": TOKEN, "name": "svc", "port": "p"}),
    HEADER.pack(VERSION, Kind.NAME_LOOKUP, 0, 5) + b"{]]]]",  # not JSON
    HEADER.pack(VERSION, Kind.NAME_LOOKUP, 0, 7) + b"[1,2,3]",  # JSON, not an object
    HEADER.pack(VERSION, Kind.NAME_LOOKUP, 0, 50_000) + b"[" * 50_000,  # nested too deeply
    HEADER.pack(VERSION, Kind.NAME_DONE, 0, 2) + b"{}",  # the relay's own answer, sent to it
    HEADER.pack(VERSION, Kind.NAME_LOOKUP, 0, 100),  # a body announced, never sent
])
def test_malformed_name_requests_get_an_error_and_the_relay_serves_on(relay, frame):
    create(relay, "a")
    names(relay, "a").publish("svc", "p")
    answer = raw_request(relay, frame)
    assert answer is None or answer[0] == Kind.ERROR
    assert names(relay, "a").lookup("svc") == "p"
    assert len(relay.server.names) == 1


def test_a_name_request_is_not_a_members_request(relay):
    """On a launcher's connection (after CREATE) a name request is out of place: refused, as any such request,
    and nothing is published."""
    launcher = RelayConnection(url(relay))
    launcher.send(Kind.CREATE, {"job": "a", "token": TOKEN, "size": 1, "fill_timeout": 60.0})
    launcher.expect(Kind.CREATED, 5)
    relay.watchers.append(launcher)
    create(relay, "b")
    launcher.send(Kind.NAME_PUBLISH, {"job": "b", "token": TOKEN, "name": "svc", "port": "p"})
    assert refusal(lambda: launcher.recv(5)) == "protocol"
    assert refusal(lambda: names(relay, "b").lookup("svc")) == "name_unknown"


def test_many_names_cost_the_relay_a_bounded_table(relay):
    """A flood of publishes from one job (and from many jobs) is refused at the bounds, not held."""
    for j in range(5):
        create(relay, f"j{j}")
    refused = 0
    for j in range(5):
        for i in range(4):
            try:
                names(relay, f"j{j}").publish(f"n{j}-{i}", "p" * 1000)
            except RelayError as exc:
                assert exc.code == "names_full"
                refused += 1
    assert len(relay.server.names) == 3 and refused == 17


def test_a_sharded_job_and_a_plain_one_share_the_first_relays_names():
    """tcp://a,b: names live at the first relay, which holds a sharded job too, so every job on the URL agrees."""
    relays = [RelayThread("127.0.0.1", 0) for _ in range(2)]
    try:
        shared = "tcp://" + ",".join("{}:{}".format(*r.address) for r in relays)
        sharded = rendezvous.job_control(shared, sharded=True)
        sharded.create("sharded-job", TOKEN, 4, 60.0, Quiet())
        plain = rendezvous.job_control(shared)
        plain.create("plain-job", TOKEN, 1, 60.0, Quiet())
        rendezvous.names(shared, "sharded-job", TOKEN).publish("svc", "port-of-the-sharded-job")
        assert rendezvous.names(shared, "plain-job", TOKEN).lookup("svc") == "port-of-the-sharded-job"
        assert len(relays[0].server.names) == 1 and len(relays[1].server.names) == 0
        sharded.end()
        deadline = time.monotonic() + 5
        while len(relays[0].server.names) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert refusal(lambda: rendezvous.names(shared, "plain-job", TOKEN).lookup("svc")) == "name_unknown"
        plain.end()
    finally:
        for r in relays:
            r.stop()
