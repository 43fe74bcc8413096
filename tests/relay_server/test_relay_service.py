"""fmpi-relay against real sockets: rendezvous, and every kind of bad input a stranger can send.

The relay under test runs in its own thread (the form fmpirun embeds) or as a
real ``fmpi-relay`` process; clients are raw sockets, so tests can send
exactly the malformed bytes they want.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests_support import fmpirun_argv

from fmpi.relay_server.server import RelayThread
from fmpi.rendezvous.relay_connection import (
    Aborted,
    RelayConnection,
    RelayError,
    register,
    wait_world,
)
from fmpi.wire.relay_protocol import (
    HEADER,
    VERSION,
    Kind,
    encode,
)

TOKEN = "t" * 24


@pytest.fixture
def relay():
    r = RelayThread("127.0.0.1", 0, first_frame_timeout=1.0)
    r.watchers = []  # a job lives as long as its launcher's connection: keep them open
    yield r
    r.stop()


def url(relay) -> str:
    return "tcp://{}:{}".format(*relay.address)


def create(relay, job="job1", size=2, fill_timeout=10.0) -> RelayConnection:
    conn = RelayConnection(url(relay))
    conn.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": size, "fill_timeout": fill_timeout})
    assert conn.expect(Kind.CREATED, 5) == {"job": job}
    relay.watchers.append(conn)
    return conn


def raw(relay) -> socket.socket:
    s = socket.create_connection(relay.address)
    s.settimeout(5)
    return s


def read_frame(s: socket.socket) -> tuple[int, dict]:
    head = b""
    while len(head) < HEADER.size:
        chunk = s.recv(HEADER.size - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    _v, kind, _r, length = HEADER.unpack(head)
    body = b""
    while len(body) < length:
        body += s.recv(length - len(body))
    return kind, json.loads(body)


def join(relay, job="job1", rank=0, token=TOKEN, incarnation="a") -> tuple[RelayConnection, int]:
    conn = RelayConnection(url(relay))
    got_rank, _size, _observed = register(conn, job, token, rank, incarnation, [("127.0.0.1", 4000 + max(rank, 0))], 5)
    return conn, got_rank


def test_world_is_published_to_all_once_full_and_lookups_give_observed_addresses(relay):
    watcher = create(relay, size=3)
    members = [join(relay, rank=r)[0] for r in (2, 0, 1)]
    for conn in members:
        assert wait_world(conn, time.monotonic() + 5) == 3
        conn.send(Kind.LOOKUP, {"ranks": [1, 3]})
        answer = conn.expect(Kind.PEERS, 5)  # (the world names no peer: a rank looks up those it links to)
        [record] = answer["peers"]
        assert record["rank"] == 1 and record["endpoints"] == [["127.0.0.1", 4001]]
        assert record["observed"][0] == "127.0.0.1"
        assert answer["missing"] == [{"rank": 3, "reason": "rank 3 is outside job 'job1' of 3 ranks"}]
    events = [watcher.expect(Kind.EVENT, 5)["type"] for _ in range(4)]
    assert events == ["joined", "joined", "joined", "world"]


def test_any_free_slot(relay):
    create(relay, size=2)
    # keep both connections open: a rank that leaves before the world frees its slot
    first, second = join(relay, rank=-1, incarnation="a"), join(relay, rank=-1, incarnation="b")
    assert sorted([first[1], second[1]]) == [0, 1]


def test_a_pinned_rank_whose_slot_a_spare_took_takes_a_free_one(relay):
    # A spare (any free slot) that starts before rank 0 takes slot 0; rank 0 must not be refused, or the
    # world would wait for the straggler the spare was there to replace.
    create(relay, size=3)
    spare = join(relay, rank=-1, incarnation="spare")
    assert spare[1] == 0
    pinned = join(relay, rank=0, incarnation="rank0")
    assert pinned[1] == 1
    third = join(relay, rank=1, incarnation="rank1")  # its slot went to rank 0: the last free one is its own now
    assert third[1] == 2
    with pytest.raises(RelayError, match="duplicate|full|already"):
        join(relay, rank=2, incarnation="straggler")  # the world is complete: the straggler is not needed


@pytest.mark.parametrize(
    "mutate, code",
    [
        (lambda b: b.update(token="x" * 24), "auth"),
        (lambda b: b.update(job="nope"), "unknown_job"),
        (lambda b: b.update(rank=5), "bad_rank"),
        (lambda b: b.update(rank="zero"), "protocol"),
        (lambda b: b.pop("incarnation"), "protocol"),
        (lambda b: b.update(endpoints=[["h", 99999]]), "protocol"),
    ],
)
def test_bad_registrations_are_refused_with_a_reason(relay, mutate, code):
    create(relay, size=2)
    body = {"job": "job1", "token": TOKEN, "rank": 0, "incarnation": "a", "endpoints": [["127.0.0.1", 1]]}
    mutate(body)
    conn = RelayConnection(url(relay))
    conn.send(Kind.REGISTER, body)
    with pytest.raises(RelayError) as info:
        conn.recv(5)
    assert info.value.code == code


def test_duplicate_invocation_of_a_rank_is_refused(relay):
    create(relay, size=2)
    first, _ = join(relay, rank=1, incarnation="first")  # still connected
    assert first.sock.fileno() >= 0
    with pytest.raises(RelayError, match="already registered") as info:
        join(relay, rank=1, incarnation="second")
    assert info.value.code == "duplicate"


def test_world_that_never_fills_fails_naming_the_missing_ranks(relay):
    watcher = create(relay, size=4, fill_timeout=0.5)
    member, _ = join(relay, rank=2)
    start = time.monotonic()
    with pytest.raises(RelayError) as info:
        wait_world(member, time.monotonic() + 5)
    assert info.value.code == "fill_timeout"
    assert "1 of 4 ranks joined; missing ranks: 0-1, 3" in str(info.value)
    assert time.monotonic() - start < 3
    watcher.expect(Kind.EVENT, 5)  # joined
    with pytest.raises(RelayError, match="missing ranks"):
        watcher.recv(5)


@pytest.mark.parametrize(
    "payload, expect",
    [
        (struct.pack("!BBHI", 9, Kind.REGISTER, 0, 2) + b"{}", "version"),
        (struct.pack("!BBHI", VERSION, 250, 0, 2) + b"{}", "unknown frame kind"),
        (struct.pack("!BBHI", VERSION, Kind.REGISTER, 0, 2**31), "exceeds the limit"),
        (struct.pack("!BBHI", VERSION, Kind.REGISTER, 0, 5) + b"{oops", "not valid JSON"),
        (struct.pack("!BBHI", VERSION, Kind.REGISTER, 0, 2) + b"[]", "JSON object"),
        (encode(Kind.FINISHED, {"code": 0}), "must start with CREATE or REGISTER"),
    ],
)
def test_malformed_frames_get_one_clear_error(relay, payload, expect):
    s = raw(relay)
    s.sendall(payload)
    kind, body = read_frame(s)
    assert kind == Kind.ERROR and expect in body["message"]
    assert s.recv(10) == b""  # and the connection is closed
    s.close()


def test_truncated_frames_and_silent_clients_do_not_hurt_other_jobs(relay):
    create(relay, job="good", size=2)
    truncated = raw(relay)
    truncated.sendall(encode(Kind.REGISTER, {"job": "good"})[:10])  # then nothing more
    silent = raw(relay)  # slow-loris: connects, never speaks
    half = raw(relay)
    half.sendall(encode(Kind.REGISTER, {"job": "good"})[:3])
    half.close()
    a, _ = join(relay, job="good", rank=0)
    b, _ = join(relay, job="good", rank=1)
    assert wait_world(a, time.monotonic() + 5) == 2
    # the silent client is cut off after the first-frame timeout, with a reason
    kind, body = read_frame(silent)
    assert kind == Kind.ERROR and body["code"] == "timeout"
    for s in (truncated, silent):
        s.close()


def test_abort_reaches_every_member_and_the_launcher(relay):
    _watcher = create(relay, size=2)  # (kept open: the job lives as long as its launcher)
    a, _ = join(relay, rank=0)
    b, _ = join(relay, rank=1)
    for conn in (a, b):
        wait_world(conn, time.monotonic() + 5)
    a.send(Kind.ABORT, {"code": 7, "reason": "bad input"})
    for conn in (a, b):
        with pytest.raises(Exception) as info:
            conn.recv(5)
        assert getattr(info.value, "exit_code", None) == 7 and info.value.rank == 0


@pytest.mark.parametrize(
    "sent, heard",
    [
        ({"lost": 1}, {"lost": 1}),
        ({"aborted": True}, {"aborted": True}),
        ({"lost": "1"}, None),  # malformed causes are dropped, the abort itself goes through
        ({"lost": -2}, None),
        ({"lost": 1, "aborted": True}, None),
        ("rank 1", None),
    ],
)
def test_an_abort_says_what_it_is_a_consequence_of(relay, sent, heard):
    # The launcher names a job's root cause from this field, not from the words of the reason.
    _watcher = create(relay, size=2)
    a, _ = join(relay, rank=0)
    b, _ = join(relay, rank=1)
    for conn in (a, b):
        wait_world(conn, time.monotonic() + 5)
    a.send(Kind.ABORT, {"code": 1, "reason": "rank 1 is gone", "cause": sent})
    with pytest.raises(Aborted) as info:
        b.recv(5)
    assert info.value.rank == 0 and info.value.cause == heard


def test_launcher_disconnect_aborts_the_job(relay):
    watcher = create(relay, size=2)
    a, _ = join(relay, rank=0)
    watcher.close()
    with pytest.raises(Exception, match="launcher disconnected"):
        a.recv(5)


def test_jobs_are_isolated(relay):
    create(relay, job="A", size=1)
    create(relay, job="B", size=1)
    a, _ = join(relay, job="A", rank=0)
    assert wait_world(a, time.monotonic() + 5) == 1
    with pytest.raises(RelayError, match="wrong token"):
        join(relay, job="B", rank=0, token="z" * 24)
    b, _ = join(relay, job="B", rank=0)
    assert wait_world(b, time.monotonic() + 5) == 1


def test_job_creation_limits(relay):
    create(relay, job="same")
    for body, code in [
        ({"job": "same", "token": TOKEN, "size": 1, "fill_timeout": 5}, "job_exists"),
        ({"job": "x", "token": "short", "size": 1, "fill_timeout": 5}, "bad_request"),
        ({"job": "y", "token": TOKEN, "size": 0, "fill_timeout": 5}, "bad_request"),
    ]:
        conn = RelayConnection(url(relay))
        conn.send(Kind.CREATE, body)
        with pytest.raises(RelayError) as info:
            conn.recv(5)
        assert info.value.code == code


def test_standalone_relay_process_serves_a_job_and_stops_cleanly(tmp_path):
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "fmpi-relay"), "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("fmpi-relay listening on tcp://127.0.0.1:")
        relay_url = line.split()[-1]
        prog = tmp_path / "p.py"
        prog.write_text("from mpi4py import MPI\nc = MPI.COMM_WORLD\nprint(c.allreduce(c.rank))\n")
        run = subprocess.run(
            [str(Path(sys.executable).parent / "fmpirun"), "-n", "3", "--relay", relay_url, sys.executable, str(prog)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["3", "3", "3"]
        proc.terminate()
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_standalone_relay_reports_a_port_in_use():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        run = subprocess.run(
            [str(Path(sys.executable).parent / "fmpi-relay"), "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert run.returncode == 1
    assert "cannot listen on 127.0.0.1:" in run.stderr and "Traceback" not in run.stderr


STEADY = """
import time
from mpi4py import MPI
c = MPI.COMM_WORLD
c.Barrier()
c.rank == 0 and print("running", flush=True)
for _ in range(600):
    c.Barrier()
    time.sleep(0.05)
"""


@pytest.mark.parametrize("attempt", range(3))
def test_a_relay_stopped_with_sigterm_ends_its_jobs_and_says_so(relay_process, tmp_path, attempt):
    relay = relay_process()
    prog = tmp_path / "steady.py"
    prog.write_text(STEADY)
    proc = subprocess.Popen(fmpirun_argv("-n", "2", "--relay", relay.url, sys.executable, str(prog)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "running\n"  # the job runs (however long a loaded machine took to start it)
    relay.proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "job aborted by the relay: the relay is shutting down" in err, err
    assert "launcher" not in err and "waiting up to" not in err, err
