"""Server-side collective providers and the choice of algorithm, without whole jobs.

Redis: a contribution repeated by a retried rank is not counted again (small
and scatter-reduce paths), its caller still gets the result, a late retry of
a completed round gets the same result, and the keys go when the job's do.
Also: multi-relay URLs, and the table's choice by channel.
"""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest

from fmpi.collectives import server_side, table
from fmpi.rank.spec import check_relay_url
from fmpi.redis_relay.collectives import RedisCollectives
from fmpi.rendezvous.relay_connection import RelayError
from fmpi.rendezvous.urls import parse_relay_url, relay_addresses

TOKEN = "t" * 32


@pytest.fixture
def job(redis_server):
    url, client = redis_server
    job = "j" + uuid.uuid4().hex[:12]
    client.hset(f"fmpi:{{{job}}}:meta", mapping={"size": 2, "state": "running"})
    yield url, client, job
    for key in client.scan_iter(match=f"fmpi:{{{job}}}:*"):
        client.delete(key)


def _wait_for(pred, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.mark.parametrize("small_max", [1 << 16, 0], ids=["small", "scatter_reduce"])
def test_duplicate_contribution_does_not_change_the_reduction(job, small_max):
    url, client, job_id = job
    ranks = [RedisCollectives(url, job_id, TOKEN, small_max=small_max) for _ in range(3)]  # rank 0, rank 0 again, rank 1
    results: dict[str, np.ndarray] = {}

    def contribute(name: str, provider, rank: int, values) -> None:
        out = np.zeros(len(values), "i8")
        provider.allreduce("c1.0", 5, rank, 2, np.array(values, "i8"), "sum", out)
        results[name] = out

    base = f"fmpi:{{{job_id}}}:coll:c1.0:5"
    first = threading.Thread(target=contribute, args=("first", ranks[0], 0, [1, 2, 3]))
    first.start()
    probe = base if small_max else f"{base}:s0"
    _wait_for(lambda: client.hexists(probe, "0"), "rank 0's contribution never arrived")
    retry = threading.Thread(target=contribute, args=("retry", ranks[1], 0, [100, 100, 100]))
    retry.start()
    calls = (base, "w0") if small_max else (f"{base}:calls", "0")
    _wait_for(lambda: int(client.hget(*calls) or 0) == 2, "the retry never arrived")
    contribute("rank1", ranks[2], 1, [10, 20, 30])
    first.join(10)
    retry.join(10)
    for name in ("first", "retry", "rank1"):
        assert results[name].tolist() == [11, 22, 33], name
    if small_max:  # a late retry of the completed round gets the same result
        contribute("late", ranks[1], 0, [7, 7, 7])
        assert results["late"].tolist() == [11, 22, 33]
    # only the record of completed rounds is left, and it lives under the job's hash tag
    left = sorted(k.decode() for k in client.scan_iter(match="fmpi:*"))
    assert left == [f"fmpi:{{{job_id}}}:coll:c1.0:done", f"fmpi:{{{job_id}}}:coll:c1.0:order", f"fmpi:{{{job_id}}}:meta"]
    assert all(client.ttl(k) > 0 for k in left if not k.endswith(":meta"))
    for p in ranks:
        p.close()


def test_barrier_and_rounds_kept(job):
    url, _client, job_id = job
    a, b = RedisCollectives(url, job_id, TOKEN, keep=2), RedisCollectives(url, job_id, TOKEN, keep=2)
    for gen in range(1, 6):
        t = threading.Thread(target=a.barrier, args=("c3.0", gen, 0, 2))
        t.start()
        b.barrier("c3.0", gen, 1, 2)
        t.join(10)
    a.barrier("c3.0", 5, 0, 2)  # a late repeat of a kept round returns at once
    with pytest.raises(RelayError, match="expired"):
        a.barrier("c3.0", 1, 0, 2)  # forgotten: refused, not a new round that would hang
    assert a.calls == {"barrier": 6} and b.calls == {"barrier": 5}


def test_job_over_refuses(job):
    url, client, job_id = job
    client.delete(f"fmpi:{{{job_id}}}:meta")
    p = RedisCollectives(url, job_id, TOKEN)
    from fmpi.redis_relay import collectives as redis_collectives
    old, redis_collectives.WAIT = redis_collectives.WAIT, 1
    try:
        with pytest.raises(RelayError, match="job_over"):
            p.barrier("c1.0", 1, 0, 2)
    finally:
        redis_collectives.WAIT = old
    assert list(client.scan_iter(match=f"fmpi:{{{job_id}}}:*")) == []


# ------------------------------------------------------------------ URLs
def test_several_relays_in_one_url():
    url = "tcp://127.0.0.1:7000,127.0.0.2:7001"
    check_relay_url(url)
    assert parse_relay_url(url) == ("127.0.0.1", 7000)
    assert relay_addresses(url) == [("127.0.0.1", 7000), ("127.0.0.2", 7001)]
    assert relay_addresses("tcp://a:1,tcp://b:2") == [("a", 1), ("b", 2)]
    for bad in ("tcp://a:7000,", "tcp://a:7000,a:7000", "tcp://a:7000,b", "redis://a:1,b:2", "udp://a:1,b:2"):
        with pytest.raises(ValueError):
            check_relay_url(bad)


# ------------------------------------------------------------------ table
def test_table_picks_the_server_only_when_it_may():
    table.configure()
    assert table.choose("allreduce", 8, 4, server=True) == "server"
    assert table.choose("barrier", 0, 4, server=True) == "server"
    assert table.choose("allreduce", 8, 4) == "recursive_doubling"
    assert table.choose("bcast", 8, 4, server=True) == "binomial"
    try:
        table.configure({"allreduce": "ring", "barrier": "server"})
        assert table.choose("allreduce", 8, 4, server=True) == "ring"  # the environment wins
        assert table.choose("barrier", 0, 4, server=False) == "dissemination"  # forced server without one
        assert table.server_forced()
    finally:
        table.reset()


def test_ops_the_server_can_apply():
    from fmpi.MPI import MAX, MAXLOC, NO_OP, REPLACE, SUM, Op

    assert server_side.server_op(SUM) == "sum" and server_side.server_op(MAX) == "max"
    assert server_side.server_op(Op.Create(lambda a, b, t: None, commute=True)) is None
    for op in (MAXLOC, REPLACE, NO_OP):
        assert server_side.server_op(op) is None
    assert server_side.plain_numeric(np.dtype("c16")) and not server_side.plain_numeric(np.dtype(">f8"))
    assert not server_side.plain_numeric(np.dtype([("v", "f8"), ("i", "i4")]))


@pytest.mark.parametrize("small_max", [1 << 16, 0], ids=["small", "scatter_reduce"])
def test_contributions_are_sealed_and_a_strangers_one_fails_the_round(job, small_max):
    """Redis holds no plaintext of a contribution; one sealed with another key (a stranger in rank 1's place)
    fails the collective on the real rank instead of changing its result."""
    url, client, job_id = job
    mine, stranger = RedisCollectives(url, job_id, TOKEN, small_max=small_max), RedisCollectives(url, job_id, "x" * 32, small_max=small_max)
    marker = b"PLAINTEXT-MARKER"
    data = np.frombuffer(marker * 4, "i8").copy()
    errors: dict[str, Exception] = {}

    def contribute(name: str, provider, rank: int) -> None:
        try:
            provider.allreduce("c9.0", 1, rank, 2, data, "sum", np.zeros_like(data))
        except RelayError as exc:
            errors[name] = exc

    first = threading.Thread(target=contribute, args=("mine", mine, 0))
    first.start()
    stored = f"fmpi:{{{job_id}}}:coll:c9.0:1" + ("" if small_max else ":s0")
    _wait_for(lambda: client.hexists(stored, "0"), "rank 0's contribution never arrived")
    assert marker not in b"".join(v for k, v in client.hgetall(stored).items())
    contribute("stranger", stranger, 1)
    first.join(10)
    assert errors["mine"].code == "forged" and "failed authentication" in str(errors["mine"])
    for p in (mine, stranger):
        p.close()
