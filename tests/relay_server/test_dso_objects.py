"""The DSO objects' logic (fmpi.relay_server.dso.store, dso_objects), without sockets: a Store driven directly.

Futures come from an event loop that never runs: a waiter is done (or not)
the moment a method resolves it, which is what these tests look at.
"""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from fmpi.relay_server.dso.objects import OPS, DsoError, Reply
from fmpi.relay_server.dso.store import OBJECT_OVERHEAD, Store


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def store(loop):
    return Store(loop.create_future, max_bytes=1 << 20, max_value=64 << 10)


def contribute(store, rank, rnd, arr, op="sum", n=4, name="r"):
    arr = np.ascontiguousarray(arr)
    return store.call("reducer", name, "contribute", {"rank": rank, "round": rnd, "n": n, "dtype": arr.dtype.str, "op": op},
                      arr.tobytes())


def value(result, dtype):
    reply = result if isinstance(result, Reply) else result.result()
    return np.frombuffer(reply.payload, dtype=dtype)


def test_reducer_folds_in_rank_order_whatever_the_arrival_order(store):
    rng = np.random.default_rng(1)
    n = 6
    data = [rng.standard_normal(1000) * 10.0 ** rng.integers(-8, 8, 1000) for _ in range(n)]
    expected = data[0].copy()
    for x in data[1:]:
        expected += x
    results = []
    for rnd in range(20):
        order = list(range(n))
        random.Random(rnd).shuffle(order)
        futures = [contribute(store, r, rnd, data[r], n=n) for r in order]
        assert all(not isinstance(f, Reply) and f.done() for f in futures[:-1]) and isinstance(futures[-1], Reply)
        results.append([value(f, np.float64) for f in futures])
    for per_round in results:
        for got in per_round:
            assert got.tobytes() == expected.tobytes()  # bitwise, every rank, every round
    # a different order of *folding* would differ in the last bits: the test can fail
    reversed_fold = data[-1].copy()
    for x in data[-2::-1]:
        reversed_fold += x
    assert reversed_fold.tobytes() != expected.tobytes()


NUMPY_OPS = {
    "sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
    "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor,
    "land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor,
}


def test_the_relay_offers_every_op_numpy_folds():
    assert sorted(OPS) == sorted(NUMPY_OPS)


@pytest.mark.parametrize("op", sorted(NUMPY_OPS))
def test_every_op_matches_numpy(store, op):
    rng = np.random.default_rng(2)
    data = [rng.integers(0, 4, 50).astype(np.int32) for _ in range(4)]
    for r in (3, 1, 0):
        contribute(store, r, 0, data[r], op=op)
    got = value(contribute(store, 2, 0, data[2], op=op), np.int32)
    ufunc = NUMPY_OPS[op]
    ref = data[0].copy()
    for x in data[1:]:
        ref = ufunc(ref, x).astype(np.int32)
    assert np.array_equal(got, ref)


def test_duplicate_contribution_is_ignored_and_still_answered(store):
    # rank 2 arrives before ranks 0 and 1, so its contribution is held (not folded yet) when it is retried
    first = contribute(store, 2, 7, np.array([3.0]), n=3)
    again = contribute(store, 2, 7, np.array([100.0]), n=3)  # a retried rank, even with other data
    contribute(store, 1, 7, np.array([2.0]), n=3)
    assert not first.done() and not again.done()
    last = contribute(store, 0, 7, np.array([1.0]), n=3)
    for res in (first, again, last):
        assert value(res, np.float64).tolist() == [6.0]
    # after completion a duplicate gets the same result, and does not start a new round
    late = contribute(store, 1, 7, np.array([50.0]), n=3)
    assert isinstance(late, Reply) and value(late, np.float64).tolist() == [6.0]


def test_reducer_refusals(store):
    contribute(store, 0, 0, np.zeros(4, np.int64))
    with pytest.raises(DsoError) as e:
        contribute(store, 1, 0, np.zeros(5, np.int64))
    assert e.value.code == "mismatch"
    with pytest.raises(DsoError) as e:
        contribute(store, 1, 0, np.zeros(4, np.int64), n=5)
    assert e.value.code == "mismatch"
    with pytest.raises(DsoError) as e:
        contribute(store, 1, 1, np.zeros(4), op="band")
    assert e.value.code == "bad_request" and "integer" in str(e.value)
    with pytest.raises(DsoError) as e:
        contribute(store, 9, 1, np.zeros(4))
    assert "outside" in str(e.value)
    with pytest.raises(DsoError):
        store.call("reducer", "r", "contribute", {"rank": 1, "round": 2, "n": 4, "dtype": "O", "op": "sum"}, b"12345678")
    with pytest.raises(DsoError):
        store.call("reducer", "r", "contribute", {"rank": 1, "round": 2, "n": 4, "dtype": "<f8", "op": "pow"}, b"12345678")


def test_old_rounds_expire_but_recent_ones_answer_late_callers(store):
    for rnd in range(5):
        for r in range(4):
            contribute(store, r, rnd, np.array([rnd], np.int64))
    assert value(contribute(store, 0, 4, np.array([0], np.int64)), np.int64).tolist() == [16]
    with pytest.raises(DsoError) as e:
        contribute(store, 0, 0, np.array([0], np.int64))
    assert e.value.code == "expired"


def test_barrier_counts_a_rank_once_per_generation(store):
    wait = lambda rank, gen: store.call("barrier", "b", "wait", {"rank": rank, "generation": gen, "n": 3})
    a = wait(0, 0)
    a2 = wait(0, 0)  # the same rank again: must not count as a second arrival
    b = wait(1, 0)
    assert not a.done() and not a2.done() and not b.done()
    c = wait(2, 0)
    assert isinstance(c, Reply) and a.done() and a2.done() and b.done()
    assert isinstance(wait(1, 0), Reply)  # a completed generation answers at once
    nxt = wait(0, 1)
    assert not nxt.done()  # the next generation starts empty


def test_mailbox_is_fifo_and_skips_takers_that_left(store, loop):
    take = lambda: store.call("mailbox", "m", "take", {})
    put = lambda v: store.call("mailbox", "m", "put", {}, v)
    gone = take()
    waiting = take()
    gone.cancel()  # its client disconnected
    put(b"first")
    assert waiting.result().payload == b"first"
    for v in (b"a", b"b", b"c"):
        put(v)
    assert [take().payload for _ in range(3)] == [b"a", b"b", b"c"]
    with pytest.raises(DsoError) as e:
        store.call("mailbox", "m", "take", {"nowait": True})
    assert e.value.code == "empty"


def test_map_cas_and_delete(store):
    m = lambda method, args, payload=b"": store.call("map", "m", method, args, payload).meta
    assert m("cas", {"key": "k", "expect_len": None}, b"v1")["swapped"]  # absent -> v1
    assert not m("cas", {"key": "k", "expect_len": None}, b"v2")["swapped"]
    assert m("cas", {"key": "k", "expect_len": 2}, b"v1v3")["swapped"]  # v1 -> v3
    assert store.call("map", "m", "get", {"key": "k"}).payload == b"v3"
    assert not m("cas", {"key": "k", "expect_len": 2, "delete": True}, b"v1")["swapped"]
    assert m("cas", {"key": "k", "expect_len": 2, "delete": True}, b"v3")["swapped"]
    assert not m("get", {"key": "k"})["found"]
    m("put", {"key": "a/1"}, b"x")
    m("put", {"key": "a/2"}, b"y")
    m("put", {"key": "b/1"}, b"z")
    assert sorted(m("keys", {"prefix": "a/"})["keys"]) == ["a/1", "a/2"]
    assert m("delete", {"key": "a/1"})["found"] and not m("delete", {"key": "a/1"})["found"]


def test_memory_is_bounded_and_accounted(store):
    with pytest.raises(DsoError) as e:
        store.call("map", "m", "put", {"key": "k"}, b"x" * (65 << 10))
    assert e.value.code == "too_large"
    for i in range(15):
        store.call("map", "m", "put", {"key": f"k{i}"}, b"x" * (64 << 10))
    with pytest.raises(DsoError) as e:
        store.call("mailbox", "mb", "put", {}, b"x" * (64 << 10))
    assert e.value.code == "quota"
    for i in range(15):
        store.call("map", "m", "delete", {"key": f"k{i}"})
    assert store.used == OBJECT_OVERHEAD  # the map itself
    store.call("any", "m", "drop", {})
    assert store.used == 0


def test_types_counter_and_close(store):
    store.call("counter", "c", "add", {"delta": 5})
    assert store.call("counter", "c", "get", {}).meta["value"] == 5
    with pytest.raises(DsoError) as e:
        store.call("map", "c", "get", {"key": "x"})
    assert e.value.code == "type"
    with pytest.raises(DsoError) as e:
        store.call("counter", "c", "add", {"delta": 1 << 63})
    assert e.value.code == "overflow"
    waiter = store.call("barrier", "b", "wait", {"rank": 0, "generation": 0, "n": 2})
    store.close("aborted", "job aborted")
    assert isinstance(waiter.exception(), DsoError) and waiter.exception().code == "aborted"
    with pytest.raises(DsoError) as e:
        store.call("counter", "c", "get", {})
    assert e.value.code == "aborted" and store.objects == {}
