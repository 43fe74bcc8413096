"""One contract, three backends: the same behaviour tests over memory://, a real fmpi-relay and a real redis-server.

Each test speaks only the protocols (``rendezvous.connect`` for ranks,
``rendezvous.job_control`` for the launcher) and, after the world, the
transport's ``RelayLine`` interface that every backend's carrier becomes, so
a backend that drifts from the others fails here by name.
"""

from __future__ import annotations

import collections
import queue
import select
import threading
import time
import uuid

import pytest
from tests_support import RelayProcess

from fmpi import rendezvous
from fmpi.natpunch.sockets import bind_reusable
from fmpi.rendezvous.relay_connection import Aborted, RelayError
from fmpi.rank.join import relay_line
from fmpi.transport.options import TransportOptions
from fmpi.wire.relay_protocol import Kind

TOKEN = "c" * 24


@pytest.fixture(scope="module")
def fmpi_relay_url():
    relay = RelayProcess()
    yield relay.url
    relay.stop()


@pytest.fixture(params=["memory", "fmpi-relay", "redis"])
def url(request):
    if request.param == "memory":
        return f"memory://contract-{uuid.uuid4().hex}"
    if request.param == "fmpi-relay":
        return request.getfixturevalue("fmpi_relay_url")
    return request.getfixturevalue("redis_server")[0]


class Launcher:
    """A JobEvents that queues what it hears."""

    def __init__(self) -> None:
        self.heard: queue.Queue = queue.Queue()

    def event(self, kind, body):
        self.heard.put((kind, body))

    def aborted(self, exc):
        self.heard.put(("aborted", exc))

    def failed(self, exc):
        self.heard.put(("failed", exc))

    def resume_state(self):
        return None

    def next(self, *skip: str):
        while True:
            kind, body = self.heard.get(timeout=10)
            if kind not in skip:
                return kind, body


@pytest.fixture
def job(url):
    """factory(size, fill_timeout) -> (job id, Launcher); every job made is ended."""
    made = []

    def make(size: int, fill_timeout: float = 20.0):
        control = rendezvous.job_control(url)
        launcher = Launcher()
        job_id = f"j{uuid.uuid4().hex[:12]}"
        control.create(job_id, TOKEN, size, fill_timeout, launcher)
        made.append(control)
        return job_id, launcher, control

    yield url, make
    for control in made:
        control.end()


def joined(url: str, job_id: str, rank: int, token: str = TOKEN, incarnation: str = "i"):
    """A rank that opened its rendezvous and registered: (rendezvous, Registered)."""
    member = rendezvous.connect(url, job_id, token)
    shared = bind_reusable(member.local_ip(), 0)
    try:
        member.open(shared, 5.0)
        return member, member.register(rank, incarnation, 5.0)
    except BaseException:
        member.close()
        raise


class Line:
    """A carrier as the transport uses it (``rank.join.relay_line``), read by the test in place of the progress loop."""

    def __init__(self, carrier) -> None:
        self.line = relay_line(carrier, TransportOptions())
        self._got: collections.deque = collections.deque()
        self.line.bind(lambda src, chunk: self._got.append((Kind.FORWARD, (src, bytes(chunk)))),
                       lambda kind, body: self._got.append((kind, body)))

    def send(self, kind: Kind, body: dict) -> None:
        self.line.send_control(kind, body)
        assert self.line.drain(5.0)

    def forward(self, dest: int, data: bytes) -> None:
        self.line.forward(dest, [memoryview(data)], None)
        assert self.line.drain(5.0)

    def next(self, want: Kind, timeout: float = 10.0):
        """The next message of kind `want` (heartbeats and others skipped): its body; (source, data) for FORWARD."""
        deadline = time.monotonic() + timeout
        while True:
            while self._got:
                kind, body = self._got.popleft()
                if kind is want:
                    return body
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {want.name} on the carrier within {timeout:g} s"
            if select.select([self.line.sock], [], [], remaining)[0]:
                self.line.on_readable()

    def lookup(self, ranks: list[int]) -> tuple[dict[int, dict], dict[int, str]]:
        """LOOKUP `ranks`: (rank -> record, rank -> why it has none)."""
        self.send(Kind.LOOKUP, {"ranks": ranks})
        body = self.next(Kind.PEERS)
        return {p["rank"]: p for p in body["peers"]}, {m["rank"]: m["reason"] for m in body["missing"]}

    def close(self) -> None:
        self.line.close_gracefully(0.2)


def world_of(url: str, job_id: str, size: int):
    """Every rank of a fresh job registered and past the world: [(rendezvous, Registered, size)]."""
    members = [joined(url, job_id, r) for r in range(size)]
    return [(m, reg, m.wait_world(time.monotonic() + 10)) for m, reg in members]


def test_world_reaches_every_rank_and_the_launcher(job):
    url, make = job
    job_id, launcher, _ = make(3)
    members = [joined(url, job_id, r) for r in (1, 2, 0)]
    for _member, reg in members:
        assert reg.size == 3 and reg.observed[1] > 0
    assert [m.wait_world(time.monotonic() + 10) for m, _ in members] == [3, 3, 3]
    heard = [launcher.next("left") for _ in range(4)]
    assert [k for k, _ in heard] == ["joined", "joined", "joined", "world"]
    assert sorted(b["rank"] for _, b in heard[:3]) == [0, 1, 2]
    assert heard[3][1]["seconds"] >= 0
    carriers = [Line(m.carrier()) for m, _ in members]
    # The world names no peer: each rank looks up those it links to, through its carrier.
    found, _ = carriers[0].lookup([0, 1, 2])
    assert [found[r]["endpoints"] for r in range(3)] == [[list(members[2][1].local)], [list(members[0][1].local)],
                                                         [list(members[1][1].local)]]
    assert found[1]["observed"] == list(members[0][1].observed)
    for c in carriers:
        c.close()


def test_a_lookup_of_a_rank_outside_the_job_says_so(job):
    url, make = job
    job_id, _, _ = make(2)
    (a, _, size), (b, reg_b, _) = world_of(url, job_id, 2)
    assert size == 2
    ca, cb = Line(a.carrier()), Line(b.carrier())
    found, missing = ca.lookup([1, 5, -1])
    assert found[1]["endpoints"] == [list(reg_b.local)]
    assert set(missing) == {5, -1}
    assert "rank 5 is outside" in missing[5] and "2 ranks" in missing[5]
    for c in (ca, cb):
        c.close()


def test_refusals_have_the_same_codes(job):
    url, make = job
    job_id, _, _ = make(2)
    first, _ = joined(url, job_id, 1, incarnation="first")
    with pytest.raises(RelayError, match=r"already registered \(incarnation '?first") as info:
        joined(url, job_id, 1, incarnation="second")
    assert info.value.code == "duplicate"
    with pytest.raises(RelayError) as info:
        joined(url, job_id, 0, token="z" * 24)
    assert info.value.code == "auth"
    with pytest.raises(RelayError) as info:
        joined(url, job_id, 7)
    assert info.value.code == "bad_rank"
    first.close()


def test_a_spare_takes_any_free_slot_once_per_incarnation(job):
    # fmpirun --spare: rank -1 takes a free slot; one invocation delivered twice (the same incarnation) is one rank.
    url, make = job
    job_id, launcher, _ = make(3)
    pinned, _ = joined(url, job_id, 0, incarnation="pinned")
    spare, registered = joined(url, job_id, -1, incarnation="spare-a")
    assert registered.rank == 1
    with pytest.raises(RelayError, match="spare-a") as info:
        joined(url, job_id, -1, incarnation="spare-a")
    assert info.value.code == "duplicate"
    other, registered = joined(url, job_id, -1, incarnation="spare-b")
    assert registered.rank == 2
    # (the launcher hears the world a spare completed: over Redis its proofs open in the order they were sealed)
    assert [launcher.next("left")[0] for _ in range(4)] == ["joined", "joined", "joined", "world"]
    with pytest.raises(RelayError) as info:  # the world is complete: a late spare is told so, and exits
        joined(url, job_id, -1, incarnation="spare-c")
    assert info.value.code in ("duplicate", "closed")
    for member in (pinned, spare, other):
        member.close()


def test_a_pinned_rank_whose_slot_a_spare_took_takes_a_free_one(job):
    # The race of fmpirun --spare: a spare that starts before rank 0 takes slot 0; rank 0, when it comes, must not
    # be refused (the world would wait for the straggler the spare was there to replace): it takes a free slot and
    # holds it as a spare does. One invocation delivered twice still joins once, and every world and 'joined'
    # event opens (over Redis each slot's record is sealed for the slot it ends in).
    url, make = job
    job_id, launcher, _ = make(3)
    spare, first = joined(url, job_id, -1, incarnation="spare")
    assert first.rank == 0
    pinned, second = joined(url, job_id, 0, incarnation="rank0")
    assert second.rank == 1
    with pytest.raises(RelayError, match="rank0") as info:  # Lambda delivered rank 0's event twice
        joined(url, job_id, 0, incarnation="rank0")
    assert info.value.code == "duplicate"
    third, last = joined(url, job_id, 1, incarnation="rank1")  # its slot went to rank 0: it moves on in turn
    assert last.rank == 2
    with pytest.raises(RelayError) as info:  # the world is complete: the straggler is not needed
        joined(url, job_id, 2, incarnation="straggler")
    assert info.value.code in ("duplicate", "closed")
    members = [spare, pinned, third]
    assert [member.wait_world(time.monotonic() + 10) for member in members] == [3, 3, 3]
    heard = [launcher.next("left") for _ in range(4)]
    assert [k for k, _ in heard] == ["joined", "joined", "joined", "world"]
    assert [(b["rank"], b["incarnation"]) for _, b in heard[:3]] == [(0, "spare"), (1, "rank0"), (2, "rank1")]
    carriers = [Line(member.carrier()) for member in members]
    for carrier in carriers:  # (every slot's record opens, wherever its rank moved)
        found, missing = carrier.lookup([0, 1, 2])
        assert not missing and [found[r]["endpoints"] for r in range(3)] == [[list(x.local)] for x in (first, second, last)]
    for carrier in carriers:
        carrier.close()


def test_an_unfilled_world_fails_naming_the_missing_ranks(job):
    url, make = job
    job_id, launcher, _ = make(4, fill_timeout=1.0)
    member, _ = joined(url, job_id, 2)
    with pytest.raises(RelayError, match="1 of 4 ranks joined; missing ranks: 0-1, 3") as info:
        member.wait_world(time.monotonic() + 10)
    assert info.value.code == "fill_timeout"
    kind, failure = launcher.next("joined", "left")
    assert kind == "failed" and failure.code == "fill_timeout"
    member.close()


def test_carriers_relay_data_and_report_finish(job):
    url, make = job
    job_id, launcher, _ = make(2)
    (a, _, _), (b, _, _) = world_of(url, job_id, 2)
    ca, cb = Line(a.carrier()), Line(b.carrier())
    data = bytes(range(256)) * 40
    ca.forward(1, data)
    assert cb.next(Kind.FORWARD) == (0, data)
    cb.send(Kind.FINISHED, {"code": 3})
    kind, body = launcher.next("joined", "left", "world")
    assert (kind, body["rank"], body["code"]) == ("finished", 1, 3)
    for c in (ca, cb):
        c.close()


def test_an_abort_reaches_every_rank_and_the_launcher(job):
    url, make = job
    job_id, launcher, control = make(2)
    (a, _, _), (b, _, _) = world_of(url, job_id, 2)
    ca, cb = Line(a.carrier()), Line(b.carrier())
    cb.send(Kind.ABORT, {"code": 5, "reason": "rank 1 gave up"})
    for carrier in (ca, cb):
        body = carrier.next(Kind.ABORT)
        assert (body["code"], body["rank"]) == (5, 1)
    kind, exc = launcher.next("joined", "left", "world")
    assert kind == "aborted" and isinstance(exc, Aborted) and (exc.exit_code, exc.rank) == (5, 1)
    for c in (ca, cb):
        c.close()


def test_the_launchers_abort_reaches_a_rank_waiting_for_the_world(job):
    url, make = job
    job_id, _, control = make(2)
    member, _ = joined(url, job_id, 0)
    got: list[BaseException] = []
    waiter = threading.Thread(target=lambda: got.append(_raised(member.wait_world, time.monotonic() + 10)))
    waiter.start()
    time.sleep(0.3)  # (the rank is blocked in its wait; an abort must wake it, not its deadline)
    control.abort(9, "stopped by the launcher")
    waiter.join(10)
    assert got and isinstance(got[0], Aborted) and got[0].exit_code == 9 and got[0].rank is None
    member.close()


def _raised(call, *args) -> BaseException | None:
    try:
        call(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the test thread
        return exc
    return None
