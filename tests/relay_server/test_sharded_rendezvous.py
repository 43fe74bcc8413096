"""A job's rendezvous sharded over several fmpi-relays (FMPI_SHARD_RENDEZVOUS=1, tcp://a,b,c; issue 28 item 4).

Real ``fmpi-relay`` processes and real sockets: rank r registers at relay
r mod k, each relay holds about N/k registrations, a rank on one relay looks
up and relays to a rank on another, and a stranger without the job's token
cannot pose as a relay of the job.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator

import pytest
from tests_support import RelayProcess, fmpirun_argv

from fmpi import rendezvous
from fmpi.natpunch.sockets import bind_reusable
from fmpi.rendezvous.relay_connection import RelayConnection, RelayError, register
from fmpi.wire.relay_protocol import Kind, forward_header, shard_forward_header

TOKEN = "shard-token-0123456789abcdef"


@pytest.fixture
def relays() -> Iterator[list[RelayProcess]]:
    """Three relays logging at INFO (each says how many ranks registered with it); stopped after the test."""
    started = [RelayProcess("--log-level", "INFO", keep_stderr=True) for _ in range(3)]
    yield started
    for r in started:
        r.stop()


def url_of(relays: list[RelayProcess]) -> str:
    return "tcp://" + ",".join("{}:{}".format(*r.address) for r in relays)


class Events:
    """A launcher's JobEvents that records what it hears."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.aborts: list = []
        self.failure: RelayError | None = None
        self.failed_at = threading.Event()

    def event(self, kind: str, body: dict) -> None:
        self.events.append((kind, body))

    def aborted(self, exc) -> None:
        self.aborts.append(exc)

    def failed(self, exc: RelayError) -> None:
        self.failure = exc
        self.failed_at.set()

    def resume_state(self):
        return None


def join_all(url: str, job: str, slots: list[int], timeout: float = 15.0) -> dict[int, tuple]:
    """Ranks (threads) that open, register and wait for the world: slot -> (rendezvous, registered, size)."""
    out: dict[int, tuple] = {}
    errors: list[BaseException] = []

    def one(i: int, slot: int) -> None:
        try:
            meeting = rendezvous.connect(url, job, TOKEN, slot, sharded=True, incarnation=f"inc-{i}-{job}")
            meeting.open(bind_reusable("127.0.0.1", 0), 5)
            registered = meeting.register(slot, f"inc-{i}-{job}", 5)
            out[i] = (meeting, registered, meeting.wait_world(time.monotonic() + timeout))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, s)) for i, s in enumerate(slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 10)
    assert not errors, errors
    return out


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def next_frame(conn: RelayConnection) -> tuple[Kind, bytes]:
    kind, payload = conn.next_frame()
    while kind is Kind.HEARTBEAT:
        kind, payload = conn.next_frame()
    return kind, bytes(payload)


def registered_here(relay: RelayProcess) -> int:
    """How many ranks the relay says registered with it when it published the world (from its log)."""
    log = relay.stop()
    found = re.findall(r"world of \d+ ranks published \((\d+) registered here", log)
    assert len(found) == 1, found
    assert "failing the job" not in log, log  # (a job that ends well ends without a lost link between relays)
    return int(found[0])


def test_each_relay_holds_its_share_and_a_rank_looks_up_and_relays_across_relays(relays):
    url = url_of(relays)
    events = Events()
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-1", TOKEN, 7, 20, events)
    ranks = join_all(url, "sharded-1", list(range(7)))
    assert {i: (reg.rank, size) for i, (_, reg, size) in ranks.items()} == {r: (r, 7) for r in range(7)}
    assert wait_for(lambda: [k for k, _ in events.events].count("world") == 1)  # (once every relay published it)
    time.sleep(0.2)
    assert [k for k, _ in events.events].count("world") == 1
    carrier = {r: ranks[r][0]._conn for r in ranks}

    # Rank 0 (relay 0) looks up ranks held by relays 1 and 2: its own relay answers with their records.
    carrier[0].send(Kind.LOOKUP, {"ranks": [1, 2, 4, 6, 9]})
    answer = carrier[0].expect(Kind.PEERS, 5)
    assert {p["rank"]: tuple(p["endpoints"][0]) for p in answer["peers"]} == {
        r: ranks[r][1].local for r in (1, 2, 4, 6)
    }
    assert [m["rank"] for m in answer["missing"]] == [9]

    # Rank 0 relays to rank 4 (relay 1); rank 5 (relay 2) to rank 3 (relay 0): the chunk arrives stamped with its source.
    carrier[0].sock.sendall(forward_header(4, 5) + b"hello")
    assert next_frame(carrier[4]) == (Kind.FORWARD, b"\x00\x00\x00\x00hello")
    carrier[5].sock.sendall(forward_header(3, 3) + b"abc")
    assert next_frame(carrier[3]) == (Kind.FORWARD, b"\x00\x00\x00\x05abc")

    # Rank 2 (relay 2) finalizes; rank 0's chunk to it is undeliverable, said by relay 2 through relay 0.
    carrier[2].send(Kind.FINISHED, {"code": 0})
    time.sleep(0.2)
    carrier[0].sock.sendall(forward_header(2, 1) + b"x")
    kind, body = carrier[0].recv(5)
    assert kind is Kind.UNDELIVERABLE and body["rank"] == 2 and body["reason"] == "finished"

    # A rank's abort reaches the ranks of every relay, and the launcher once.
    carrier[1].send(Kind.ABORT, {"code": 3, "reason": "stop"})
    for r in (0, 4, 6):
        with pytest.raises(RelayError, match="aborted by rank 1"):
            carrier[r].recv(5)
    assert wait_for(lambda: len(events.aborts) == 1)
    time.sleep(0.3)
    assert len(events.aborts) == 1 and events.aborts[0].rank == 1
    control.end()
    for meeting, _, _ in ranks.values():
        meeting.close()
    assert [registered_here(r) for r in relays] == [3, 2, 2]  # ranks 0,3,6 / 1,4 / 2,5


def test_ranks_that_take_any_slot_spread_over_the_relays(relays):
    url = url_of(relays)
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-any", TOKEN, 6, 20, Events())
    ranks = join_all(url, "sharded-any", [-1] * 6)
    assert sorted(reg.rank for _, reg, _ in ranks.values()) == list(range(6))
    control.end()
    for meeting, _, _ in ranks.values():
        meeting.close()
    assert [registered_here(r) for r in relays] == [2, 2, 2]


SPARE = next(f"spare-{i}" for i in range(100) if zlib.crc32(f"spare-{i}".encode()) % 2 == 0)


def test_a_rank_that_takes_any_slot_moves_on_from_a_full_relay(relays):
    url = url_of(relays[:2])
    control, events = rendezvous.job_control(url, sharded=True), Events()
    control.create("sharded-move", TOKEN, 2, 20, events)
    first = threading.Thread(target=join_all, args=(url, "sharded-move", [0]), daemon=True)
    first.start()
    assert wait_for(lambda: ("joined", 0) in [(k, b.get("rank")) for k, b in events.events])
    spare = rendezvous.connect(url, "sharded-move", TOKEN, -1, sharded=True, incarnation=SPARE)  # (starts at relay 0: full)
    spare.open(bind_reusable("127.0.0.1", 0), 5)
    registered = spare.register(-1, SPARE, 5)
    assert registered.rank == 1 and spare.wait_world(time.monotonic() + 10) == 2
    first.join(10)
    spare.close()
    control.end()
    assert [registered_here(r) for r in relays[:2]] == [1, 1]


def test_a_spare_delivered_twice_joins_once(relays):
    """The platform may deliver one invocation twice: both copies try the same relay first, where the second is
    refused (as on one relay), instead of taking a second slot at another relay."""
    url = url_of(relays)
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-twice", TOKEN, 6, 20, Events())
    copies = [rendezvous.connect(url, "sharded-twice", TOKEN, -1, sharded=True, incarnation="once") for _ in range(2)]
    for copy in copies:
        copy.open(bind_reusable("127.0.0.1", 0), 5)
    copies[0].register(-1, "once", 5)
    with pytest.raises(RelayError, match="already joined") as err:
        copies[1].register(-1, "once", 5)
    assert err.value.code == "duplicate"
    for copy in copies:
        copy.close()
    control.end()


def test_a_job_smaller_than_its_relays_fills_with_an_empty_relay(relays):
    url = url_of(relays)
    control, events = rendezvous.job_control(url, sharded=True), Events()
    control.create("sharded-small", TOKEN, 2, 20, events)
    ranks = join_all(url, "sharded-small", [0, 1])
    assert sorted(size for _, _, size in ranks.values()) == [2, 2]
    assert wait_for(lambda: "world" in [k for k, _ in events.events])  # (the empty relay's too)
    control.end()
    for meeting, _, _ in ranks.values():
        meeting.close()
    assert [registered_here(r) for r in relays] == [1, 1, 0]


def test_a_world_that_does_not_fill_names_the_missing_ranks_of_every_relay(relays):
    url = url_of(relays)
    events = Events()
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-fill", TOKEN, 5, 1.0, events)
    meeting = rendezvous.connect(url, "sharded-fill", TOKEN, 1, sharded=True)
    meeting.open(bind_reusable("127.0.0.1", 0), 5)
    meeting.register(1, "inc-1", 5)
    assert events.failed_at.wait(10)
    assert events.failure.code == "fill_timeout"
    assert events.failure.details["missing"] == [0, 2, 3, 4]
    assert "1 of 5 ranks joined; missing ranks: 0, 2-4" in str(events.failure)
    control.end()
    meeting.close()


def test_a_rank_registers_only_at_its_own_relay(relays):
    url = url_of(relays)
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-wrong", TOKEN, 6, 20, Events())
    conn = RelayConnection(relays[0].url)
    conn.send(Kind.REGISTER, {"job": "sharded-wrong", "token": TOKEN, "rank": 4, "incarnation": "x", "endpoints": []})
    with pytest.raises(RelayError, match=r"rank 4 .* registers at relay 1 of 3") as err:
        conn.expect(Kind.REGISTERED, 5)
    assert err.value.code == "wrong_shard"
    conn.close()
    control.end()


def hello(relay: RelayProcess, body: dict) -> RelayError:
    conn = RelayConnection(relay.url)
    try:
        conn.send(Kind.SHARD_HELLO, body)
        with pytest.raises(RelayError) as err:
            conn.expect(Kind.SHARD, 5)
        return err.value
    finally:
        conn.close()


def test_a_stranger_cannot_pose_as_a_relay_of_the_job(relays):
    url = url_of(relays)
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-auth", TOKEN, 3, 20, Events())
    assert hello(relays[1], {"job": "sharded-auth", "token": "not-the-token-at-all", "shard": 0}).code == "auth"
    assert hello(relays[1], {"job": "sharded-auth", "token": TOKEN, "shard": 1}).code == "bad_request"  # (itself)
    assert hello(relays[1], {"job": "no-such-job", "token": TOKEN, "shard": 0}).code == "unknown_job"
    # A job that is not sharded has no shard links at all.
    plain = RelayConnection(relays[2].url)
    plain.send(Kind.CREATE, {"job": "plain", "token": TOKEN, "size": 2, "fill_timeout": 20})
    plain.expect(Kind.CREATED, 5)
    assert hello(relays[2], {"job": "plain", "token": TOKEN, "shard": 0}).code == "protocol"
    plain.close()
    # The one who knows the token is a relay of the job: accepted.
    conn = RelayConnection(relays[1].url)
    conn.send(Kind.SHARD_HELLO, {"job": "sharded-auth", "token": TOKEN, "shard": 2})
    assert conn.expect(Kind.SHARD, 5) == {"type": "hello"}
    conn.close()
    control.end()


def test_a_chunk_from_another_relay_reaches_a_rank_only_after_its_world(relays):
    """A relay whose world is out may relay to a rank whose own relay has not heard the last "full" yet: the chunk
    waits for that rank's WORLD (a rank reads nothing but WORLD until then)."""
    url = url_of(relays[:2])
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-early", TOKEN, 2, 20, Events())
    one = RelayConnection(relays[1].url)
    one.send(Kind.REGISTER, {"job": "sharded-early", "token": TOKEN, "rank": 1, "incarnation": "i1", "endpoints": []})
    one.expect(Kind.REGISTERED, 5)
    # Posing as relay 0 (whoever has the token may): a chunk for rank 1 before relay 1 has its world.
    shard = RelayConnection(relays[1].url)
    shard.send(Kind.SHARD_HELLO, {"job": "sharded-early", "token": TOKEN, "shard": 0})
    assert shard.expect(Kind.SHARD, 5) == {"type": "hello"}
    shard.sock.sendall(shard_forward_header(0, 1, 5) + b"early")
    time.sleep(0.3)
    zero = RelayConnection(relays[0].url)
    zero.send(Kind.REGISTER, {"job": "sharded-early", "token": TOKEN, "rank": 0, "incarnation": "i0", "endpoints": []})
    zero.expect(Kind.REGISTERED, 5)
    assert next_frame(one) == (Kind.WORLD, b'{"size":2}')
    assert next_frame(one) == (Kind.FORWARD, b"\x00\x00\x00\x00early")
    for conn in (one, shard, zero):
        conn.close()
    control.end()


def test_a_lost_relay_fails_the_job_on_every_relay(relays):
    """A sharded job does not outlive one of its relays (it cannot resume there): the launcher hears the failure,
    and the ranks of the other relays are told why."""
    url = url_of(relays[:2])
    events = Events()
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-lost", TOKEN, 2, 20, events)
    ranks = join_all(url, "sharded-lost", [0, 1])
    relays[1].stop()
    assert events.failed_at.wait(10)
    with pytest.raises(RelayError, match="lost one of its relays") as err:
        ranks[0][0]._conn.recv(10)
    assert err.value.code == "shard_lost"
    control.end()
    for meeting, _, _ in ranks.values():
        meeting.close()


def test_a_rank_that_reconnects_resyncs_with_the_ranks_of_other_relays(relays):
    url = url_of(relays[:2])
    control = rendezvous.job_control(url, sharded=True)
    control.create("sharded-back", TOKEN, 2, 20, Events())
    ranks = join_all(url, "sharded-back", [0, 1])
    zero = ranks[0][0]._conn
    # Rank 1's connection to relay 1 is replaced by a new one (as after a reset): rank 0, on relay 0, hears it.
    again = RelayConnection(relays[1].url)
    register(again, "sharded-back", TOKEN, 1, "inc-1-sharded-back", [ranks[1][1].local], 5, rejoin_as=ranks[1][1].observed)
    assert again.reconnected
    assert zero.recv(5) == (Kind.PEER_BACK, {"rank": 1})
    # Until rank 0 says RESYNCED, its chunks to rank 1 belong to the broken stream: dropped.
    zero.sock.sendall(forward_header(1, 3) + b"old")
    zero.send(Kind.RESYNCED, {"rank": 1})
    zero.sock.sendall(forward_header(1, 3) + b"new")
    assert next_frame(again) == (Kind.FORWARD, b"\x00\x00\x00\x00new")
    again.close()
    control.end()
    for meeting, _, _ in ranks.values():
        meeting.close()


PROGRAM = """
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1, op=MPI.SUM)
out = np.full(1000, rank, dtype=np.int64)
got = np.empty(1000, dtype=np.int64)
for step in range(3):
    comm.Sendrecv(out, dest=(rank + 1) % size, recvbuf=got, source=(rank - 1) % size)
    assert (got == (rank - 1) % size).all()
sums = np.empty(4, dtype=np.float64)
comm.Allreduce(np.full(4, float(rank)), sums, op=MPI.SUM)
print(f"rank {rank} ok total={total} sums={sums[0]:g}", flush=True)
"""


@pytest.mark.parametrize("channel,n", [("relay", 8), ("direct", 4)])
def test_fmpirun_over_three_sharded_relays(relays, tmp_path, channel, n):
    prog = tmp_path / "ring.py"
    prog.write_text(PROGRAM)
    env = {**os.environ, "FMPI_SHARD_RENDEZVOUS": "1"}
    proc = subprocess.run(
        fmpirun_argv("-n", str(n), "-v", "--relay", url_of(relays), "--channel", channel, sys.executable, str(prog)),
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expect = n * (n + 1) // 2
    for r in range(n):
        assert f"rank {r} ok total={expect} sums={n * (n - 1) // 2:g}" in proc.stdout, proc.stdout + proc.stderr
    links = re.search(r"links: \d+ \((\d+) direct, (\d+) punched, (\d+) relayed\)", proc.stderr)
    assert links, proc.stderr
    if channel == "relay":
        assert links.group(1) == links.group(2) == "0" and int(links.group(3)) > 0, proc.stderr
    else:
        assert links.group(3) == "0", proc.stderr
    shares = [registered_here(r) for r in relays]
    assert shares == [len(range(i, n, 3)) for i in range(3)], shares
