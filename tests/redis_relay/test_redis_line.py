"""Ranks joined in this process through a real redis-server: tokens, mailboxes, TTLs, events, aborts, cleanup."""

from __future__ import annotations

import select
import threading
import time

import pytest

from fmpi import rendezvous
from fmpi.launcher.job import Job
from fmpi.natpunch.sockets import bind_reusable
from fmpi.rank import join as bootstrap
from fmpi.rank.join import join
from fmpi.rank.spec import RankSpec
from fmpi.rendezvous.redis import DEFAULT_TTL, connect, job_pattern
from fmpi.rendezvous.redis_line import INBOUND_LIMIT
from fmpi.rendezvous.redis_mailbox import (
    BATCH_ITEMS,
    FINISHED,
    JOB_GONE,
    QUEUED,
    RankMailbox,
)
from fmpi.rendezvous.redis_seal import DATA, JobKey, Opener, Sealer
from fmpi.rendezvous.relay_connection import RelayError
from fmpi.transport.options import TransportOptions
from fmpi.transport.requests import TransportError
from fmpi.wire.relay_protocol import Kind

RELAY = TransportOptions(channel="relay")


def _b(data: bytes) -> list[memoryview]:
    return [memoryview(data)]


def join_all(job: Job, options=RELAY) -> list[bootstrap.RankSession]:
    sessions: list = [None] * job.size
    errors: list = []

    def enter(r: int) -> None:
        try:
            sessions[r] = join(job.spec(r), options=options)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=enter, args=(r,)) for r in range(job.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return sessions


def keys_of(client, job: Job) -> list[bytes]:
    return list(client.scan_iter(match=job_pattern(job.id), count=1000))


@pytest.fixture
def exits(monkeypatch):
    """Record the exit a rank asks for instead of ending the test process."""
    codes: list[int] = []
    monkeypatch.setattr(bootstrap, "_exit_now", codes.append)
    return codes


def test_a_wrong_token_is_refused_and_the_right_one_admitted(redis_server):
    url, client = redis_server
    job = Job(url, 1, 10.0)
    try:
        good = job.spec(0)
        bad = RankSpec(good.job, 0, 1, url, "x" * 24)
        with pytest.raises(RelayError) as refused:
            join(bad, options=RELAY)
        assert refused.value.code == "auth"
        assert not job.state.joined  # the refused rank took no slot
        session = join(good, options=RELAY)
        assert (session.rank, session.size) == (0, 1)
        session.finalize(0)
        assert job.wait(lambda s: s.finished == {0: 0}, 10)
    finally:
        job.end()
    assert keys_of(client, job) == []


def test_relayed_messages_events_and_ttls(redis_server):
    url, client = redis_server
    outputs: list[tuple[int, str, str]] = []
    job = Job(url, 3, 10.0, on_output=lambda r, s, d: outputs.append((r, s, d)))
    try:
        a, b, c = join_all(job)
        big = bytes(range(256)) * 4096 * 3  # 3 MiB: twelve chunks, reassembled in order
        sends = [a.engine.isend(1, 0, 5, _b(big)), a.engine.isend(2, 0, 6, _b(b"small"))]
        got_b, got_c = b.engine.irecv(0, 0, 5, None), c.engine.irecv(0, 0, 6, None)
        for engine, op in ((b.engine, got_b), (c.engine, got_c), *((a.engine, s) for s in sends)):
            engine.wait(op, timeout=20)
        assert bytes(got_b.payload) == big and bytes(got_c.payload) == b"small"
        b.send_to_relay(Kind.OUTPUT, {"stream": "stdout", "data": "hello from 1\n"})
        deadline = time.monotonic() + 10
        while not outputs and time.monotonic() < deadline:
            time.sleep(0.02)
        assert outputs == [(1, "stdout", "hello from 1\n")]
        live = keys_of(client, job)
        assert any(k.endswith(b":meta") for k in live) and any(k.endswith(b":members") for k in live)
        for key in live:  # nothing may stay in the user's Redis for ever, even if fmpirun vanished
            assert 0 < client.ttl(key) <= DEFAULT_TTL, key
        for s in (a, b, c):
            s.finalize(0)
        assert job.wait(lambda s: len(s.finished) == 3, 10)
        counts = job.state.links.counts()  # the ranks' link reports reached the launcher through Redis
        assert counts.get("relayed") == 2 and not counts.get("direct") and not counts.get("punched"), counts
    finally:
        job.end()
    assert keys_of(client, job) == []


def test_sending_to_a_finalized_rank_fails_instead_of_hanging(redis_server, exits):
    url, client = redis_server
    job = Job(url, 2, 10.0)
    try:
        a, b = join_all(job)
        b.finalize(0)
        assert job.wait(lambda s: 1 in s.finished, 10)
        with pytest.raises(TransportError) as info:
            a.engine.wait(a.engine.isend(1, 0, 0, _b(b"too late")), timeout=10)
        assert info.value.error_class in ("ERR_PEER_FINALIZED", "ERR_PEER_DIED")
        a.finalize(0)
    finally:
        job.end()
    assert exits == []
    assert keys_of(client, job) == []


def test_the_launchers_abort_reaches_every_rank(redis_server, exits):
    url, client = redis_server
    job = Job(url, 2, 10.0)
    try:
        sessions = join_all(job)
        job.abort(7, "stopped by the test")
        deadline = time.monotonic() + 10
        while len(exits) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert exits == [7, 7]
        with pytest.raises(TransportError):
            sessions[0].engine.wait(sessions[0].engine.irecv(1, 0, 0, None), timeout=5)
        for s in sessions:
            s.engine.abandon()
            s._closed = True
    finally:
        job.end()
    assert keys_of(client, job) == []


def test_fill_timeout_names_the_missing_ranks(redis_server):
    url, client = redis_server
    job = Job(url, 3, 0.5)
    try:
        session_error: list[BaseException] = []
        t = threading.Thread(target=lambda: _join_expecting_failure(job.spec(1), session_error))
        t.start()
        assert job.wait(lambda s: s.failure is not None, 10)
        assert "missing ranks: 0, 2" in str(job.state.failure)
        t.join(10)
        assert session_error and "missing ranks" in str(session_error[0])
    finally:
        job.end()
    assert keys_of(client, job) == []


def _join_expecting_failure(spec, errors) -> None:
    try:
        join(spec, options=RELAY)
    except RelayError as exc:
        errors.append(exc)


# ------------------------------------------------------------------ the mailbox alone
def test_mailbox_keeps_order_refuses_finished_ranks_and_never_revives_an_ended_job(redis_server):
    url, client = redis_server
    job = Job(url, 2, 10.0)
    key = JobKey(job.token, job.id)
    box0 = RankMailbox(connect(url), connect(url), job.id, 0, Sealer(key, 0), ttl=120)
    box1 = RankMailbox(connect(url), connect(url), job.id, 1, Sealer(key, 1), ttl=120)
    opener = Opener(key, 1)
    try:
        items = [i.to_bytes(4, "big") + bytes([i % 256]) * (1000 + i) for i in range(150)]  # spans 3 script batches
        assert box0.push(1, items) == QUEUED
        assert 0 < client.ttl(box1.mbox) <= 120
        received: list[bytes] = []
        while len(received) < len(items):
            what, got = box1.next()
            assert what == "chunks"
            received.extend(got)
        assert [opener.open(DATA, item, ordered=True) for item in received] == [(0, item) for item in items]
        assert not client.exists(box1.mbox)  # emptied lists vanish: nothing to clean
        assert box1.finished(0, None)
        assert box0.push(1, [b"\0\0\0\0late"]) == FINISHED
        assert not client.exists(box1.mbox)
    finally:
        job.end()
    assert box0.push(1, [b"\0\0\0\0after the end"]) == JOB_GONE
    assert not box0.event({"type": "output", "stream": "stdout", "data": "x"})
    assert keys_of(client, job) == []
    box0.close()
    box1.close()


# ------------------------------------------------------------------ the line alone
def _lines(url: str, job: Job) -> list:
    """Both ranks of a 2-rank `job` past the world, each its Redis line (events bound, not read yet)."""
    members = []
    for rank in range(2):
        member = rendezvous.connect(url, job.id, job.token)
        member.open(bind_reusable(member.local_ip(), 0), 5.0)
        member.register(rank, f"i{rank}", 5.0)
        members.append(member)
    lines = []
    for member in members:
        member.wait_world(time.monotonic() + 10)
        line = member.carrier().line
        got: list = []
        line.bind(lambda src, chunk, got=got: got.append((src, bytes(chunk))), lambda kind, body: None)
        lines.append((line, got))
    return lines


def test_a_line_stops_popping_while_its_engine_has_not_taken_what_arrived(redis_server):
    # A rank that computes while a peer floods it must not pull the whole flood out of Redis into its memory: the
    # line's downlink stops popping once INBOUND_LIMIT bytes wait for the engine (plus the one batch it popped).
    url, client = redis_server
    job = Job(url, 2, 10.0)
    try:
        (a, _), (b, got) = _lines(url, job)
        frame = bytes(range(256)) * (256 * 1024)  # 64 MiB: 256 chunks of 256 KiB
        a.forward(1, [memoryview(frame)], None)
        assert a.drain(60)
        mbox = f"fmpi:{{{job.id}}}:mbox:1"
        time.sleep(1.0)  # (time for a downlink without a bound to pop it all)
        left = client.llen(mbox)
        held = INBOUND_LIMIT + BATCH_ITEMS * 256 * 1024
        assert left >= (len(frame) - held) // (256 * 1024), f"only {left} chunks left in Redis"
        deadline = time.monotonic() + 60
        while sum(len(c) for _, c in got) < len(frame) and time.monotonic() < deadline:
            if select.select([b.sock], [], [], 1.0)[0]:
                b.on_readable()
        assert b"".join(c for _, c in got) == frame and {src for src, _ in got} == {0}
        assert client.llen(mbox) == 0
        for line in (a, b):
            line.close_gracefully(1.0)
    finally:
        job.end()
