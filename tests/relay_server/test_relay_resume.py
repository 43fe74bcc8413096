"""A job re-created on a restarted fmpi-relay (CREATE with resume) takes its live ranks back.

Against a real ``fmpi-relay`` process: a launcher connection CREATEs the job
with ``resume`` as a launcher does after the relay came back empty, ranks
REGISTER again with ``"resume": true``. Frames are read raw where the test
must see HEARTBEAT or FORWARD frames (``RelayConnection.recv`` skips the
first and cannot decode the second).
"""

from __future__ import annotations

import itertools
import math
import socket
import time
from typing import Any

import pytest
from tests_support import RelayProcess

from fmpi.rendezvous.relay_connection import (
    Aborted,
    RelayConnection,
    RelayError,
    register,
)
from fmpi.wire.relay_protocol import (
    FORWARD_RANK,
    Kind,
    decode_body,
    forward_header,
)

TOKEN = "r" * 24
_ids = itertools.count()


@pytest.fixture(scope="module")
def relay():
    """One relay for the module: every test uses its own job ids."""
    r = RelayProcess()
    yield r
    r.stop()


def new_job() -> str:
    return f"resume-{next(_ids)}"


def open_conn(relay: RelayProcess, conns: list[RelayConnection]) -> RelayConnection:
    conn = RelayConnection(relay.url)
    conns.append(conn)
    return conn


def create_resumed(relay, conns, job: str, size: int, incarnations: dict[int, str],
                   finished: dict[int, int] | None = None, rejoin_timeout: float = 30.0) -> RelayConnection:
    """The launcher's CREATE after a relay restart; its connection (the watcher)."""
    resume = {
        "incarnations": {str(r): inc for r, inc in incarnations.items()},
        "finished": {str(r): code for r, code in (finished or {}).items()},
        "rejoin_timeout": rejoin_timeout,
    }
    watcher = open_conn(relay, conns)
    watcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": size, "fill_timeout": 10, "resume": resume})
    assert watcher.expect(Kind.CREATED, 5) == {"job": job, "resumed": True}
    return watcher


def rejoin_body(job: str, rank: int, incarnation: str, **extra: Any) -> dict[str, Any]:
    """A REGISTER body as a rank sends it to take its slot back (see client.register)."""
    return {"job": job, "token": TOKEN, "rank": rank, "incarnation": incarnation,
            "endpoints": [["127.0.0.1", 5000 + rank]], "heartbeat": True, "resume": True, **extra}


def rejoin(relay, conns, job: str, rank: int, incarnation: str, **extra: Any) -> tuple[RelayConnection, dict]:
    """A rank rejoins: its connection and the REGISTERED body, after checking the relay beat to it at once."""
    conn = open_conn(relay, conns)
    conn.send(Kind.REGISTER, rejoin_body(job, rank, incarnation, **extra))
    registered = conn.expect(Kind.REGISTERED, 5)
    if extra.get("heartbeat", True):
        assert raw_frame(conn, 5, heartbeats=True)[0] is Kind.HEARTBEAT
    return conn, registered


def refusal(relay, conns, kind: Kind, body: dict[str, Any]) -> RelayError:
    conn = open_conn(relay, conns)
    conn.send(kind, body)
    with pytest.raises(RelayError) as info:
        conn.recv(5)
    return info.value


def forward(conn: RelayConnection, dest: int, data: bytes) -> None:
    conn.sock.sendall(forward_header(dest, len(data)) + data)


def raw_frame(conn: RelayConnection, timeout: float, heartbeats: bool = False) -> tuple[Kind, bytes]:
    """The next frame from the relay, undecoded (heartbeats skipped unless `heartbeats`)."""
    conn.sock.settimeout(timeout)
    while True:
        kind, body = conn.next_frame()
        if heartbeats or kind != Kind.HEARTBEAT:
            return kind, bytes(body)


def forwarded(conn: RelayConnection, timeout: float = 5) -> tuple[int, bytes]:
    """(source rank, chunk) of the next frame, which must be a FORWARD."""
    kind, body = raw_frame(conn, timeout)
    assert kind is Kind.FORWARD, f"{kind.name} {body[:200]!r} where a FORWARD was expected"
    return FORWARD_RANK.unpack_from(body)[0], body[FORWARD_RANK.size :]


def control(conn: RelayConnection, timeout: float = 5) -> tuple[Kind, dict]:
    """The next frame, heartbeats aside, decoded as JSON."""
    kind, body = raw_frame(conn, timeout)
    return kind, decode_body(kind, body)


def quiet(conn: RelayConnection, seconds: float) -> bool:
    """Nothing but heartbeats arrives within `seconds`."""
    try:
        kind, body = raw_frame(conn, seconds)
    except socket.timeout:
        return True
    raise AssertionError(f"unexpected {kind.name}: {body[:200]!r}")


# ------------------------------------------------------------------ rejoining
def test_ranks_rejoin_without_a_new_world_and_the_launcher_hears_each(relay, conns):
    job = new_job()
    watcher = create_resumed(relay, conns, job, 3, {0: "inc-0", 1: "inc-1"}, finished={2: 0})
    a, reg_a = rejoin(relay, conns, job, 0, "inc-0", observed=["203.0.113.7", 41000])
    assert reg_a == {"rank": 0, "size": 3, "observed": ["203.0.113.7", 41000]}
    assert watcher.expect(Kind.EVENT, 5) == {"type": "rejoined", "rank": 0}
    # An "observed" that is not a [host, port] pair: the relay says where it sees the rank now.
    b, reg_b = rejoin(relay, conns, job, 1, "inc-1", observed=["h", "not a port"])
    assert reg_b["observed"] == list(b.sock.getsockname()[:2])
    assert watcher.expect(Kind.EVENT, 5) == {"type": "rejoined", "rank": 1}
    # Every rank is back, and still no WORLD: the ranks have it from before the restart.
    assert quiet(a, 0.5) and quiet(b, 0.1)


def test_a_resumed_job_serves_shared_objects_too(relay, conns):
    job = new_job()
    create_resumed(relay, conns, job, 1, {0: "x"})
    attached = open_conn(relay, conns)
    attached.send(Kind.DSO_ATTACH, {"job": job, "token": TOKEN})
    assert attached.expect(Kind.DSO_ATTACHED, 5)["job"] == job


def test_the_joined_event_carries_the_incarnation(relay, conns):
    # (what a launcher needs to re-create the job after a restart)
    job = new_job()
    watcher = open_conn(relay, conns)
    watcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": 2, "fill_timeout": 10})
    assert watcher.expect(Kind.CREATED, 5) == {"job": job}
    register(open_conn(relay, conns), job, TOKEN, 1, "host-b-pid-42", [("127.0.0.1", 5001)], 5)
    assert watcher.expect(Kind.EVENT, 5) == {"type": "joined", "rank": 1, "joined": 1, "size": 2, "incarnation": "host-b-pid-42"}


@pytest.mark.parametrize(
    "rank, incarnation, changes, code, words",
    [
        (1, "impostor", {}, "duplicate", ["rank 1", "'inc-1'", "'impostor'"]),
        (0, "other", {}, "duplicate", ["rank 0", "'inc-0'", "'other'"]),  # (as inc-0 it is a reconnect: reconnect.py)
        (1, "inc-1", {"resume": None}, "duplicate", ["already complete"]),  # a plain REGISTER
        (2, "inc-2", {}, "bad_rank", ["rank 2", "finished (exit code 3)"]),
        (3, "inc-3", {}, "bad_rank", ["rank 3 is outside"]),
        (-1, "inc-1", {}, "bad_rank", ["rank -1 is outside"]),
        (1, "inc-1", {"resume": "yes"}, "bad_request", ["'resume' must be true or false"]),
    ],
)
def test_a_rejoin_that_is_not_expected_is_refused_with_why(relay, conns, rank, incarnation, changes, code, words):
    job = new_job()
    watcher = create_resumed(relay, conns, job, 3, {0: "inc-0", 1: "inc-1"}, finished={2: 3})
    rejoin(relay, conns, job, 0, "inc-0")
    request = {k: v for k, v in {**rejoin_body(job, rank, incarnation), **changes}.items() if v is not None}
    error = refusal(relay, conns, Kind.REGISTER, request)
    assert error.code == code
    for word in words:
        assert word in str(error), str(error)
    # The refusal took nothing: rank 1 still rejoins as itself.
    rejoin(relay, conns, job, 1, "inc-1")
    assert [watcher.expect(Kind.EVENT, 5)["rank"] for _ in range(2)] == [0, 1]


def test_resume_on_a_job_that_is_not_resuming_is_refused(relay, conns):
    job = new_job()
    watcher = open_conn(relay, conns)
    watcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": 2, "fill_timeout": 10})
    watcher.expect(Kind.CREATED, 5)
    error = refusal(relay, conns, Kind.REGISTER, rejoin_body(job, 0, "a"))
    assert error.code == "bad_request" and f"job {job!r} is not resuming" in str(error)


GOOD = {"incarnations": {"0": "a", "1": "b"}, "finished": {"2": 0}, "rejoin_timeout": 5}


@pytest.mark.parametrize(
    "resume, words",
    [
        ("yes", "must be an object"),
        ({**GOOD, "incarnations": ["a", "b"]}, "incarnations must be an object"),
        ({k: v for k, v in GOOD.items() if k != "incarnations"}, "incarnations must be an object"),
        ({**GOOD, "incarnations": {"0": "a", "1": "b", "3": "c"}}, "'3' is not a rank of this job (0 to 2"),
        ({**GOOD, "incarnations": {"0": "a", "01": "b"}}, "'01' is not a rank"),
        ({**GOOD, "incarnations": {"0": "a", "-1": "b"}}, "'-1' is not a rank"),
        ({**GOOD, "incarnations": {"0": "a", "1": ""}}, "incarnations['1'] must be the rank's incarnation"),
        ({**GOOD, "incarnations": {"0": "a", "1": "b" * 129}}, "a string of 1 to 128 characters"),
        ({**GOOD, "incarnations": {"0": "a", "1": 7}}, "incarnations['1'] must be"),
        ({**GOOD, "finished": {"2": "0"}}, "finished['2'] must be the rank's exit code"),
        ({**GOOD, "finished": {"2": True}}, "finished['2'] must be the rank's exit code"),
        ({**GOOD, "finished": {"1": 0, "2": 0}}, "ranks 1 are in both incarnations and finished"),
        ({**GOOD, "finished": {}}, "ranks 2 are in neither incarnations nor finished"),
        ({**GOOD, "rejoin_timeout": 0}, "rejoin_timeout must be a positive number"),
        ({**GOOD, "rejoin_timeout": -1}, "rejoin_timeout must be a positive number"),
        ({**GOOD, "rejoin_timeout": math.inf}, "rejoin_timeout must be a positive number"),
        ({**GOOD, "rejoin_timeout": math.nan}, "rejoin_timeout must be a positive number"),
        ({**GOOD, "rejoin_timeout": "30"}, "rejoin_timeout must be a positive number"),
        ({**GOOD, "rejoin_timeout": True}, "rejoin_timeout must be a positive number"),
    ],
)
def test_a_malformed_resume_is_refused_and_leaves_no_job(relay, conns, resume, words):
    job = new_job()
    create = {"job": job, "token": TOKEN, "size": 3, "fill_timeout": 10}
    error = refusal(relay, conns, Kind.CREATE, {**create, "resume": resume})
    assert error.code == "bad_request" and words in str(error), str(error)
    watcher = open_conn(relay, conns)
    watcher.send(Kind.CREATE, {**create, "resume": GOOD})  # the id is still free; the good form is taken
    assert watcher.expect(Kind.CREATED, 5) == {"job": job, "resumed": True}


# ------------------------------------------------------------------ relayed chunks
def test_chunks_to_a_rank_not_back_yet_wait_for_it_in_order(relay, conns):
    job = new_job()
    create_resumed(relay, conns, job, 4, {0: "i0", 1: "i1", 2: "i2"}, finished={3: 0})
    a, _ = rejoin(relay, conns, job, 0, "i0")
    c, _ = rejoin(relay, conns, job, 2, "i2")
    big = bytes(range(256)) * 300  # 76800 bytes: more than one socket read
    forward(a, 1, b"RESUME from 0")
    forward(a, 1, big)
    # A FORWARD to the finished rank 3 is refused; its UNDELIVERABLE, the first
    # frame back, also shows nothing was refused for rank 1 before it.
    forward(a, 3, b"too late")
    assert control(a) == (Kind.UNDELIVERABLE, {"rank": 3, "reason": "finished", "message": "rank 3 has finalized"})
    forward(c, 1, b"RESUME from 2")
    forward(c, 3, b"too late")
    assert control(c)[1]["reason"] == "finished"
    b, _ = rejoin(relay, conns, job, 1, "i1")  # (its HEARTBEAT came first: checked in rejoin)
    assert [forwarded(b) for _ in range(3)] == [(0, b"RESUME from 0"), (0, big), (2, b"RESUME from 2")]
    # From now on chunks flow as on any job, both ways.
    forward(b, 0, b"from 1")
    forward(a, 1, b"after")
    assert forwarded(a) == (1, b"from 1")
    assert forwarded(b) == (0, b"after")


def test_what_is_held_for_one_rank_is_bounded(conns):
    relay = RelayProcess(keep_stderr=True)  # (at log level WARNING)
    try:
        job = new_job()
        create_resumed(relay, conns, job, 3, {0: "i0", 1: "i1"}, finished={2: 0})
        a, _ = rejoin(relay, conns, job, 0, "i0")
        quarter = 256 << 10  # four fill the 1 MiB a relay holds for a rank
        chunks = [bytes([n]) * quarter for n in range(5)] + [b"small, but after a dropped chunk"]
        for chunk in chunks:
            forward(a, 1, chunk)
        forward(a, 2, b"x")  # (its answer: the relay has read every chunk above)
        assert control(a, 10)[0] is Kind.UNDELIVERABLE
        b, _ = rejoin(relay, conns, job, 1, "i1")
        assert [forwarded(b, 10) for _ in range(4)] == [(0, chunk) for chunk in chunks[:4]]
        forward(a, 1, b"live")
        assert forwarded(b) == (0, b"live")  # not the dropped fifth or sixth chunk
    finally:
        log = relay.stop()
    assert log.count("before it rejoined") == 1, log


# ------------------------------------------------------------------ ranks that do not come back
def test_ranks_not_back_in_time_are_lost_to_all(relay, conns):
    job = new_job()
    start = time.monotonic()
    watcher = create_resumed(relay, conns, job, 4, {0: "i0", 1: "i1", 2: "i2"}, finished={3: 0}, rejoin_timeout=0.5)
    a, _ = rejoin(relay, conns, job, 0, "i0")
    forward(a, 2, b"held, then dropped with rank 2")
    assert watcher.expect(Kind.EVENT, 5) == {"type": "rejoined", "rank": 0}
    assert watcher.expect(Kind.EVENT, 5) == {"type": "lost", "rank": 1, "rejoin": False}
    assert watcher.expect(Kind.EVENT, 5) == {"type": "lost", "rank": 2, "rejoin": False}
    assert time.monotonic() - start >= 0.45
    assert [control(a) for _ in range(2)] == [(Kind.PEER_LOST, {"rank": 1}), (Kind.PEER_LOST, {"rank": 2})]
    # Too late: the rank is refused, and chunks to it are undeliverable (not held).
    error = refusal(relay, conns, Kind.REGISTER, rejoin_body(job, 2, "i2"))
    assert error.code == "duplicate" and "did not rejoin within 0.5 s" in str(error)
    forward(a, 1, b"to a lost rank")
    assert control(a) == (Kind.UNDELIVERABLE, {"rank": 1, "reason": "lost", "message": "rank 1 is gone"})


def test_no_rank_is_lost_once_all_are_back(relay, conns):
    job = new_job()
    watcher = create_resumed(relay, conns, job, 2, {0: "i0", 1: "i1"}, rejoin_timeout=0.5)
    for rank in (0, 1):
        rejoin(relay, conns, job, rank, f"i{rank}")
        assert watcher.expect(Kind.EVENT, 5) == {"type": "rejoined", "rank": rank}
    with pytest.raises(socket.timeout):
        watcher.recv(1.5)


def test_a_rejoined_rank_that_falls_silent_is_lost(conns):
    relay = RelayProcess("--heartbeat-timeout", "1")
    try:
        job = new_job()
        watcher = create_resumed(relay, conns, job, 2, {0: "i0"}, finished={1: 0})
        rejoin(relay, conns, job, 0, "i0")  # (and never beats back)
        assert watcher.expect(Kind.EVENT, 5) == {"type": "rejoined", "rank": 0}
        lost = watcher.expect(Kind.EVENT, 10)
        assert lost["type"] == "lost" and lost["rank"] == 0 and lost["silent"] >= 1
    finally:
        relay.stop()


def test_a_launcher_that_goes_away_still_ends_a_resumed_job(relay, conns):
    job = new_job()
    watcher = create_resumed(relay, conns, job, 2, {0: "i0", 1: "i1"})
    a, _ = rejoin(relay, conns, job, 0, "i0")
    watcher.close()
    with pytest.raises(Aborted, match="launcher disconnected"):
        a.recv(5)
