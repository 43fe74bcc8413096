"""Rendezvous through a real redis-server: the job life cycle, refusals, and no keys left behind."""

from __future__ import annotations

import queue
import time

import pytest

from fmpi.rendezvous.redis import RedisJob, RedisRank, connect
from fmpi.rendezvous.relay_connection import Aborted, RelayError

TOKEN = "k" * 24


@pytest.fixture
def job_factory(redis_server):
    url, client = redis_server
    jobs: list[RedisJob] = []
    counter = iter(range(10_000))

    def make(size: int, fill_timeout: float = 10.0):
        events: queue.Queue = queue.Queue()
        job = RedisJob(url, f"job{next(counter)}-{time.monotonic_ns()}", TOKEN, size, fill_timeout, lambda k, e: events.put((k, e)))
        jobs.append(job)
        return job, events

    yield url, client, make
    for job in jobs:
        job.end()


def rank(url, job, r=-1, token=TOKEN, incarnation="i"):
    member = RedisRank(url, job.job, token)
    member.register(r, incarnation, [("10.0.0.1", 5000 + max(r, 0))])
    return member


def test_world_reaches_every_rank_with_observed_addresses(job_factory):
    url, _client, make = job_factory
    job, events = make(3)
    members = [rank(url, job, r) for r in (1, 2, 0)]
    assert [m.wait_world(time.monotonic() + 5) for m in members] == [3, 3, 3]
    for m in members:  # (the world names no peer: a rank looks up the records of those it links to)
        found = {p["rank"]: p for p in m.lookup([0, 1, 2])["peers"]}
        assert found[1]["endpoints"] == [["10.0.0.1", 5001]]
        assert found[1]["observed"][0] == "127.0.0.1" and found[1]["observed"][1] > 0
    kinds = [events.get(timeout=5)[0] for _ in range(4)]
    assert kinds == ["joined", "joined", "joined", "world"]
    for m in members:
        m.close()


def test_refusals(job_factory):
    url, _client, make = job_factory
    job, _ = make(2)
    first = rank(url, job, 1, incarnation="first")
    with pytest.raises(RelayError, match="already registered \\(incarnation first\\)") as info:
        rank(url, job, 1, incarnation="second")
    assert info.value.code == "duplicate"
    with pytest.raises(RelayError) as info:
        rank(url, job, 0, token="z" * 24)
    assert info.value.code == "auth"
    with pytest.raises(RelayError) as info:
        rank(url, job, 7)
    assert info.value.code == "bad_rank"
    first.close()


def test_fill_timeout_names_missing_ranks_to_members_and_launcher(job_factory):
    url, _client, make = job_factory
    job, events = make(4, fill_timeout=0.5)
    member = rank(url, job, 2)
    with pytest.raises(RelayError, match="1 of 4 ranks joined; missing ranks: 0-1, 3") as info:
        member.wait_world(time.monotonic() + 5)
    assert info.value.code == "fill_timeout"
    assert events.get(timeout=5)[0] == "joined"
    assert events.get(timeout=5)[0] == "error"
    member.close()


def test_abort_reaches_everyone(job_factory):
    url, _client, make = job_factory
    job, events = make(2)
    a, b = rank(url, job, 0), rank(url, job, 1)
    for m in (a, b):
        m.wait_world(time.monotonic() + 5)
    heard: queue.Queue = queue.Queue()
    b.follow(heard.put)
    a.abort(9, "out of memory", {"lost": 1})
    notice = heard.get(timeout=5)
    assert isinstance(notice, Aborted) and notice.exit_code == 9 and notice.rank == 0
    assert notice.cause == {"lost": 1}  # what it was a consequence of travels with it
    while True:
        kind, event = events.get(timeout=5)
        if kind == "abort":
            assert event["reason"] == "out of memory" and event["cause"] == {"lost": 1}
            break
    a.close()
    b.close()


def test_a_job_leaves_no_key_behind(job_factory):
    url, client, make = job_factory
    job, _ = make(2)
    members = [rank(url, job, r) for r in (0, 1)]
    for m in members:
        m.wait_world(time.monotonic() + 5)
        m.event({"type": "finished", "code": 0})
    assert client.keys(f"fmpi:{{{job.job}}}:*")  # the job did write keys
    assert all(client.ttl(k) > 0 for k in client.keys(f"fmpi:{{{job.job}}}:*"))  # each with a TTL
    for m in members:
        m.close()
    job.end()
    assert client.keys(f"fmpi:{{{job.job}}}:*") == []


def test_a_rank_closing_after_the_job_ended_leaves_only_a_short_lived_key(job_factory):
    url, client, make = job_factory
    job, _ = make(1)
    member = rank(url, job, 0)
    member.wait_world(time.monotonic() + 5)
    job.end()
    member.close()
    leftovers = client.keys(f"fmpi:{{{job.job}}}:*")
    assert leftovers == [f"fmpi:{{{job.job}}}:inbox:0".encode()]
    assert 0 < client.ttl(leftovers[0]) <= 60


def test_wrong_password_and_unreachable_server_are_named(redis_server):
    url, _ = redis_server
    bad = url.replace("pw-for-tests", "nope")
    with pytest.raises(RelayError, match="refused the password") as info:
        connect(bad)
    assert "nope" not in str(info.value)  # the password never appears in messages
    with pytest.raises(RelayError, match="cannot reach Redis at redis://127.0.0.1:1/0"):
        connect("redis://127.0.0.1:1/0", timeout=2)


def test_ranks_that_take_any_free_slot_are_sealed_and_heard(job_factory):
    # (fmpirun --join without --rank: the record and the joined proof are sealed before the slot is known)
    url, client, make = job_factory
    job, events = make(2)
    members = [rank(url, job, incarnation=f"i{k}") for k in range(2)]  # (one incarnation joins once)
    assert sorted(m.rank for m in members) == [0, 1]
    assert [m.wait_world(time.monotonic() + 5) for m in members] == [2, 2]
    for m in members:
        assert [p["endpoints"] for p in m.lookup([0, 1])["peers"]] == [[["10.0.0.1", 5000]], [["10.0.0.1", 5000]]]
    heard = [events.get(timeout=5) for _ in range(3)]
    assert [(k, e.get("rank")) for k, e in heard[:2]] == [("joined", 0), ("joined", 1)] and heard[2][0] == "world"
    stored = b"".join(v for v in client.hgetall(f"fmpi:{{{job.job}}}:members").values())
    assert b"10.0.0.1" not in stored and b"127.0.0.1" not in stored  # endpoints and observed address are sealed
    for m in members:
        m.close()


def test_a_forged_world_or_abort_before_the_world_is_refused_and_the_real_world_taken(job_factory, capfd):
    url, client, make = job_factory
    job, _events = make(2)
    first = rank(url, job, 0)
    inbox = f"fmpi:{{{job.job}}}:inbox:0"
    forged_record = '{"incarnation":"x","sealed":"' + "A" * 80 + '"}'
    client.rpush(inbox, '{"kind":"world","size":2,"peers":[{"rank":0,"member":%s},{"rank":1,"member":%s}]}' % (forged_record, forged_record))
    client.rpush(inbox, '{"kind":"world"}')  # (an unsealed world would start the rank before its peers joined)
    client.rpush(inbox, '{"kind":"abort","code":9,"reason":"forged","rank":1}')
    client.rpush(inbox, b"\x01" + b"\0" * 80)  # shaped like an envelope, sealed with nothing
    second = rank(url, job, 1)
    assert first.wait_world(time.monotonic() + 5) == 2
    assert [p["endpoints"] for p in first.lookup([0, 1])["peers"]] == [[["10.0.0.1", 5000]], [["10.0.0.1", 5001]]]
    lines = [line for line in capfd.readouterr().err.splitlines() if "refused a message in Redis" in line]
    assert len(lines) == 1 and lines[0].startswith("fmpi: rank 0: refused"), lines
    for m in (first, second):
        m.close()


def test_a_lookup_names_ranks_without_a_valid_record(job_factory):
    url, client, make = job_factory
    job, _events = make(2)
    first, second = rank(url, job, 0), rank(url, job, 1)
    assert first.wait_world(time.monotonic() + 5) == 2
    client.hset(f"fmpi:{{{job.job}}}:members", 1, '{"incarnation":"x","sealed":"' + "A" * 80 + '"}')  # a forgery
    answer = first.lookup([0, 1, 9])
    assert [p["rank"] for p in answer["peers"]] == [0]
    why = {m["rank"]: m["reason"] for m in answer["missing"]}
    assert "outside a job of 2 ranks" in why[9] and "no valid record of rank 1" in why[1]
    for m in (first, second):
        m.close()
