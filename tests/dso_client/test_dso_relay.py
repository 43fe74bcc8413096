"""Shared objects (DSO) against real `fmpi-relay` processes: semantics, concurrency, sharding, jobs, faults."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from fmpi.dso_client.client import DsoClient
from fmpi.dso_client.hash_ring import HashRing
from fmpi.dso_client.host import DsoHost
from fmpi.dso_client.node_connection import SharedObjectError
from fmpi.rendezvous.relay_connection import RelayConnection, RelayError
from fmpi.wire.relay_protocol import (
    HEADER,
    VERSION,
    Kind,
    dso_head,
    encode,
)

TOKEN = "dso-test-token-0123456789"


def new_job() -> str:
    return "job-" + uuid.uuid4().hex[:12]


@pytest.fixture
def one(relay_pair):
    """A job hosted on the first relay; a client factory for it."""
    job = new_job()
    host = DsoHost(relay_pair[0].url, job, TOKEN)
    clients: list[DsoClient] = []

    def client(**kw) -> DsoClient:
        clients.append(DsoClient(relay_pair[0].url, job, TOKEN, timeout=20, **kw))
        return clients[-1]

    client.job = job
    client.host = host
    yield client
    for c in clients:
        c.close()
    host.end()


def both_urls(relay_pair) -> str:
    return "tcp://" + ",".join("{}:{}".format(*r.address) for r in relay_pair)


# ------------------------------------------------------------------ semantics
def test_mailbox_fifo_and_blocking_take(one):
    a, b = one(), one()
    mb = a.mailbox("inbox")
    for i in range(5):
        mb.put(b"item-%d" % i)
    assert mb.size() == 5
    assert [b.mailbox("inbox").take(timeout=5) for _ in range(5)] == [b"item-%d" % i for i in range(5)]
    got = []
    t = threading.Thread(target=lambda: got.append(b.mailbox("inbox").take(timeout=10)))
    t.start()
    time.sleep(0.2)
    assert got == []  # blocked while empty
    mb.put(b"late")
    t.join(10)
    assert got == [b"late"]
    start = time.monotonic()
    with pytest.raises(SharedObjectError) as e:
        b.mailbox("inbox").take(timeout=0.3)
    assert e.value.code == "timeout" and 0.25 < time.monotonic() - start < 3
    # the timed-out take did not swallow the next item
    mb.put(b"after-timeout")
    assert b.mailbox("inbox").take(timeout=5) == b"after-timeout"
    assert b.mailbox("inbox").take_nowait() is None


def test_counter_and_map_are_atomic_under_contention(one):
    clients = [one() for _ in range(8)]

    def work(c: DsoClient) -> None:
        for _ in range(50):
            c.counter("hits").add(1)
            while True:  # increment through compare-and-set
                cur = c.map("m").get("n")
                nxt = str(int(cur or b"0") + 1).encode()
                if c.map("m").cas("n", cur, nxt)[0]:
                    break

    threads = [threading.Thread(target=work, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert clients[0].counter("hits").get() == 400
    assert clients[0].map("m").get("n") == b"400"
    m = clients[0].map("m")
    assert m.put("k", b"v") is False and m.put("k", b"w") is True and m.get("k") == b"w"
    assert m.delete("k") and not m.delete("k") and m.get("k") is None
    assert clients[0].counter("never").get() == 0 and clients[0].info("never")["exists"] is False


def test_barrier_generations_and_duplicate_arrival(one):
    c = one()
    a = c.barrier_async("b", 0, 0, size=3)
    dup = c.barrier_async("b", 0, 0, size=3)  # rank 0 again: counts once
    b = c.barrier_async("b", 0, 1, size=3)
    with pytest.raises(SharedObjectError) as e:
        a.result(timeout=0.5)
    assert e.value.code == "timeout"  # still waiting for rank 2
    c.barrier("b", 0, 2, size=3)
    b.result(timeout=5)
    dup.result(timeout=5)
    c.barrier("b", 0, 1, size=3, timeout=5)  # a completed generation answers at once
    with pytest.raises(SharedObjectError) as e:
        c.barrier("b", 1, 0, size=3, timeout=0.3)  # the next one does not
    assert e.value.code == "timeout"
    with pytest.raises(SharedObjectError) as e:
        c.barrier("b", 1, 0, size=4, timeout=1)
    assert e.value.code == "mismatch"


def test_allreduce_ops_dtypes_and_duplicates(one):
    c = one()
    rng = np.random.default_rng(3)
    for rnd, (dtype, op) in enumerate([("<f8", "sum"), ("<i4", "max"), ("<u2", "bxor"), ("<i8", "land"), ("<c16", "prod"), ("?", "lor")]):
        data = [(rng.standard_normal(17) * 4).astype(dtype).reshape(17, 1) for _ in range(4)]
        pend = [c.allreduce_async("red", rnd, r, data[r], op, size=4) for r in (2, 0, 3)]
        dup = c.allreduce_async("red", rnd, 0, data[1], op, size=4)  # rank 0 again, other data: ignored
        last = c.allreduce("red", rnd, 1, data[1], op, size=4)
        ref = data[0].copy()
        for x in data[1:]:
            ref = np.asarray(getattr(np, {"sum": "add", "max": "maximum", "bxor": "bitwise_xor", "land": "logical_and",
                                          "prod": "multiply", "lor": "logical_or"}[op])(ref, x)).astype(dtype)
        for p in pend + [dup]:
            got = p.result(timeout=10)
            assert got.shape == (17, 1) and got.dtype == np.dtype(dtype)
            assert got.tobytes() == ref.tobytes()
        assert last.tobytes() == ref.tobytes()
    out = np.empty(3, np.float32)
    parts = [c.allreduce_async("o", 0, r, np.full(3, r, np.float32), size=2) for r in (0,)]
    assert c.allreduce("o", 0, 1, np.full(3, 1, np.float32), size=2, out=out) is out
    parts[0].result(5)
    assert out.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(SharedObjectError) as e:
        c.allreduce("red", 99, 0, np.zeros(2), "band", size=4, timeout=2)
    assert e.value.code == "bad_request"


def test_errors_are_clear_and_the_connection_stays_usable(one, relay_process):
    c = one()
    c.counter("x").add(1)
    with pytest.raises(SharedObjectError) as e:
        c.map("x").put("k", b"v")
    assert e.value.code == "type" and "is a counter" in str(e.value)
    # a value over the relay's limit (64 MiB by default): refused, named, connection kept
    with pytest.raises(SharedObjectError) as e:
        c.mailbox("big").put(np.zeros((64 << 20) // 8 + 1))
    assert e.value.code == "too_large" and "limit" in str(e.value) and c.node_of("big") in str(e.value)
    assert c.counter("x").get() == 1
    # a per-job memory bound, on a relay configured small
    small = relay_process("--dso-job-bytes", "1M", "--dso-max-value", "256K")
    job = new_job()
    with DsoHost(small.url, job, TOKEN), DsoClient(small.url, job, TOKEN) as s:
        for i in range(3):
            s.map("m").put(f"k{i}", b"x" * (256 << 10))
        with pytest.raises(SharedObjectError) as e:
            s.map("m").put("k3", b"x" * (256 << 10))
        assert e.value.code == "quota"
        with pytest.raises(SharedObjectError) as e:
            s.map("m").put("k4", b"x" * (257 << 10))
        assert e.value.code == "too_large"
        s.map("m").delete("k0")
        s.map("m").put("k3", b"x" * (256 << 10))  # freed memory is usable again


# ---------------------------------------------------------------- concurrency
WORKER = r"""
import json, sys, time
import numpy as np
from fmpi.dso_client.client import DsoClient
relays, job, token, rank, n, gens = json.loads(sys.argv[1])
c = DsoClient(relays, job, token, rank=rank, size=n, timeout=60)
bad, results = [], []
for g in range(gens):
    c.counter("arrived").add(1)
    c.barrier("world", g)
    seen = c.counter("arrived").get()
    if seen < n * (g + 1):
        bad.append((g, seen))
    x = np.random.default_rng(1000 * g + rank).standard_normal(1000)
    first = c.allreduce_async("sum", g, rank, x)
    if g % 5 == 0:   # a retried contribution, with different data: must not count
        dup = c.allreduce_async("sum", g, rank, x * 7)
        assert dup.result().tobytes() == first.result().tobytes()
    r = first.result()
    results.append(r.tobytes().hex() if g % 10 == 0 else float(r.sum()))
print(json.dumps({"bad": bad, "results": results}))
"""


def expected_sum(g: int, n: int) -> np.ndarray:
    acc = None
    for rank in range(n):
        x = np.random.default_rng(1000 * g + rank).standard_normal(1000)
        acc = x.copy() if acc is None else acc + x
    return acc


def test_eight_processes_hit_one_barrier_and_reducer_over_many_generations(relay_pair):
    job, n, gens = new_job(), 8, 40
    url = both_urls(relay_pair)
    with DsoHost(url, job, TOKEN):
        procs = [
            subprocess.Popen([sys.executable, "-c", WORKER, json.dumps([url, job, TOKEN, r, n, gens])],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in range(n)
        ]
        outs = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=240)
                assert p.returncode == 0, err
                outs.append(json.loads(out))
        finally:
            for p in procs:
                p.kill()
    for out in outs:
        assert out["bad"] == []  # nobody left a barrier before everyone arrived
    for g in range(gens):
        ref = expected_sum(g, n)
        got = [o["results"][g] for o in outs]
        if g % 10 == 0:
            assert got == [ref.tobytes().hex()] * n  # bitwise identical everywhere, duplicates ignored
        else:
            assert got == [pytest.approx(float(ref.sum()), rel=0, abs=0)] * n


def test_eight_threads_share_one_client_with_pipelined_calls(one):
    c = one(size=8)
    errors = []

    def rank(r: int) -> None:
        try:
            for g in range(30):
                c.barrier("tb", g, r)
                v = c.allreduce("tr", g, r, np.array([r + g], np.int64))
                assert v.tolist() == [28 + 8 * g]
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]


# ------------------------------------------------------------------- sharding
def test_objects_are_sharded_by_name_and_both_nodes_serve(relay_pair):
    job = new_job()
    url = both_urls(relay_pair)
    a_url, b_url = relay_pair[0].url, relay_pair[1].url
    # node A holds the job as a rendezvous job (CREATE), node B only its objects (DSO_CREATE)
    launcher = RelayConnection(a_url)
    launcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": 2, "fill_timeout": 600})
    launcher.expect(Kind.CREATED, 5)
    with DsoHost(url, job, TOKEN, skip=[a_url]):
        c = DsoClient(url, job, TOKEN, rank=0, size=1)
        names = [f"obj-{i}" for i in range(200)]
        placement = {name: c.node_of(name) for name in names}
        on_a = [n for n in names if placement[n] == a_url]
        on_b = [n for n in names if placement[n] == b_url]
        assert len(on_a) + len(on_b) == 200 and 50 <= len(on_a) <= 150  # a ring with virtual nodes spreads names
        # the listing order of the nodes does not matter: every rank maps names alike
        other = DsoClient(f"tcp://{relay_pair[1].address[0]}:{relay_pair[1].address[1]},{relay_pair[0].address[0]}:{relay_pair[0].address[1]}", job, TOKEN)
        assert all(other.node_of(n) == placement[n] for n in names)
        for name in on_a[:10] + on_b[:10]:
            assert c.counter(name).add(len(name)) == len(name)
            c.barrier(name + "/b", 0)
            assert c.allreduce(name + "/r", 0, 0, np.arange(3)).tolist() == [0, 1, 2]
        only_a, only_b = DsoClient(a_url, job, TOKEN), DsoClient(b_url, job, TOKEN)
        for name in on_a[:10]:
            assert only_a.counter(name).get() == len(name) and not only_b.info(name)["exists"]
        for name in on_b[:10]:
            assert only_b.counter(name).get() == len(name) and not only_a.info(name)["exists"]
        for cl in (c, other, only_a, only_b):
            cl.close()
    launcher.close()


def test_hash_ring_moves_few_names_when_a_node_is_added():
    names = [f"n{i}" for i in range(3000)]
    three = HashRing(["a:1", "b:1", "c:1"])
    four = HashRing(["a:1", "b:1", "c:1", "d:1"])
    moved = sum(three.node(n) != four.node(n) for n in names)
    assert moved < 0.4 * len(names)  # ideal 1/4; a modulo hash would move 3/4
    assert all(four.node(n) == "d:1" for n in names if three.node(n) != four.node(n))


# ------------------------------------------------------------ jobs and faults
def test_abort_fails_waiters_and_frees_the_objects(relay_pair):
    job = new_job()
    url = relay_pair[0].url
    host = DsoHost(url, job, TOKEN)
    c = DsoClient(url, job, TOKEN)
    c.map("m").put("k", b"x" * 1000)
    waiting = c.call_async("mailbox", "mb", "take", blocking=True, timeout=30)
    time.sleep(0.1)
    host.abort("rank 3 failed")
    with pytest.raises(SharedObjectError) as e:
        waiting.result(timeout=10)
    assert e.value.code == "aborted" and "rank 3 failed" in str(e.value)
    with pytest.raises(SharedObjectError) as e:
        DsoClient(url, job, TOKEN).map("m").get("k")
    assert e.value.code == "aborted"
    host.end()
    # the job id is free again, and nothing of the old job is left
    with DsoHost(url, job, TOKEN), DsoClient(url, job, TOKEN) as fresh:
        assert fresh.info("m")["exists"] is False and fresh.map("m").get("k") is None


def test_rendezvous_job_end_and_member_abort_free_objects(relay_pair):
    url = relay_pair[0].url
    job = new_job()
    launcher = RelayConnection(url)
    launcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": 1, "fill_timeout": 600})
    launcher.expect(Kind.CREATED, 5)
    c = DsoClient(url, job, TOKEN)
    c.counter("k").add(3)
    waiting = c.barrier_async("b", 0, 0, size=2, timeout=30)
    launcher.send(Kind.ABORT, {"code": 2, "reason": "launcher says stop"})
    with pytest.raises(SharedObjectError) as e:
        waiting.result(10)
    assert e.value.code == "aborted"
    launcher.close()  # the launcher leaves: the job ends
    time.sleep(0.2)
    with pytest.raises(SharedObjectError) as e:
        DsoClient(url, job, TOKEN).counter("k").get()
    assert e.value.code == "unknown_job"


def test_jobs_are_isolated_and_a_wrong_token_is_refused(relay_pair):
    url = relay_pair[0].url
    j1, j2 = new_job(), new_job()
    with DsoHost(url, j1, TOKEN), DsoHost(url, j2, TOKEN[::-1]):
        a, b = DsoClient(url, j1, TOKEN), DsoClient(url, j2, TOKEN[::-1])
        a.map("shared-name").put("k", b"job1")
        assert b.map("shared-name").get("k") is None and not b.info("shared-name")["exists"]
        b.counter("shared-name2").add(5)
        assert a.counter("shared-name2").get() == 0
        with pytest.raises(SharedObjectError) as e:
            DsoClient(url, j1, TOKEN[::-1]).counter("c").get()
        assert e.value.code == "auth" and "wrong token" in str(e.value)
        with pytest.raises(SharedObjectError) as e:
            DsoClient(url, "no-such-job", TOKEN).counter("c").get()
        assert e.value.code == "unknown_job"
        # a rank cannot register into a job that only has objects here
        conn = RelayConnection(url)
        conn.send(Kind.REGISTER, {"job": j1, "token": TOKEN, "rank": 0, "incarnation": "x", "endpoints": []})
        with pytest.raises(RelayError) as e:
            conn.recv(5)
        assert e.value.code == "unknown_job"


def _raw_attach(address, job) -> socket.socket:
    s = socket.create_connection(address)
    s.settimeout(5)
    s.sendall(encode(Kind.DSO_ATTACH, {"job": job, "token": TOKEN}))
    head = s.recv(HEADER.size, socket.MSG_WAITALL)
    _v, kind, _r, length = HEADER.unpack(head)
    assert kind == Kind.DSO_ATTACHED
    s.recv(length, socket.MSG_WAITALL)
    return s


def test_a_client_vanishing_mid_wait_breaks_nothing(relay_pair):
    url = relay_pair[0].url
    job, other_job = new_job(), new_job()
    with DsoHost(url, job, TOKEN), DsoHost(url, other_job, TOKEN):
        c = DsoClient(url, job, TOKEN)
        # rank 0 arrives at a barrier and at a mailbox take, then its connection dies
        s = _raw_attach(relay_pair[0].address, job)
        for req, meta in enumerate([
            {"type": "barrier", "name": "b", "method": "wait", "args": {"rank": 0, "generation": 0, "n": 2}},
            {"type": "mailbox", "name": "mb", "method": "take"},
        ], start=1):
            s.sendall(dso_head(Kind.DSO_CALL, req, meta, 0))
        half = dso_head(Kind.DSO_CALL, 3, {"type": "map", "name": "m", "method": "put", "args": {"key": "k"}}, 1000)
        s.sendall(half + b"x" * 10)  # and a call cut off in the middle
        time.sleep(0.2)
        s.close()
        time.sleep(0.2)
        # the relay still serves this job and others
        c.barrier("b", 0, 1, size=2, timeout=5)  # rank 0's arrival counted
        c.mailbox("mb").put(b"not lost")
        assert c.mailbox("mb").take(timeout=5) == b"not lost"  # the vanished taker did not swallow it
        with DsoClient(url, other_job, TOKEN) as o:
            assert o.counter("x").add(2) == 2
        # garbage on a DSO connection closes only that connection, with a reason
        s = _raw_attach(relay_pair[0].address, job)
        s.sendall(HEADER.pack(VERSION, Kind.DSO_CALL, 0, 3) + b"abc")
        head = s.recv(HEADER.size, socket.MSG_WAITALL)
        assert HEADER.unpack(head)[1] == Kind.ERROR
        s.close()
        assert c.counter("x").add(1) == 1


def test_a_relay_dying_mid_call_gives_a_clear_error_naming_it(relay_process):
    r = relay_process()
    job = new_job()
    host = DsoHost(r.url, job, TOKEN)
    c = DsoClient(r.url, job, TOKEN)
    waiting = c.barrier_async("b", 0, 0, size=2, timeout=60)
    time.sleep(0.1)
    r.proc.kill()
    start = time.monotonic()
    with pytest.raises(SharedObjectError) as e:
        waiting.result(timeout=30)
    assert time.monotonic() - start < 10
    assert e.value.code in ("lost", "job_over", "aborted") and r.url in str(e.value)
    with pytest.raises(SharedObjectError):
        c.counter("x").get()
    host.close()
