"""Every algorithm of collectives/, at every N from 1 to 9, against numpy references.

Runs in-process (see harness.py): real engines over loopback, one thread per
rank, so the whole matrix takes seconds. Tiny segments force the pipelined,
multi-segment paths with small data; layouts include empty blocks, uneven
blocks and scattered (non-contiguous, permuted) placements.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from coll_harness import World

from fmpi.collectives import (
    allgather_recursive_doubling,
    allreduce_recursive_doubling,
    alltoall_pairwise,
    barrier_dissemination,
    bcast_binomial,
    gather_binomial,
    reduce_binomial,
    scan_recursive_doubling,
    scatter_binomial,
    table,
)
from fmpi.collectives.options import (
    AllgatherOptions,
    AllreduceOptions,
    AlltoallOptions,
    BcastOptions,
    GatherOptions,
    Layout,
    ReduceOptions,
    ReduceScatterOptions,
    ScanOptions,
    ScatterOptions,
)
from fmpi.wire import pickle_oob as serialize

SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9]
SEGMENTS = [8, 24, 1 << 20]  # bytes: many segments, a few, one

AFFINE = np.dtype([("a", "<i8"), ("b", "<i8")])


def add(lower, higher, out):
    np.add(lower, higher, out=out)


def affine(lower, higher, out):
    """x -> a*x + b maps composed in rank order (lower first): associative, not commutative."""
    a = lower["a"] * higher["a"]
    b = higher["a"] * lower["b"] + higher["b"]
    out["a"] = a
    out["b"] = b


def affine_fold(values):
    acc = values[0].copy()
    for v in values[1:]:
        affine(acc, v, acc)
    return acc


def affine_data(rank: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(1000 + rank)
    x = np.empty(count, AFFINE)
    x["a"] = rng.integers(-3, 4, count)
    x["b"] = rng.integers(-100, 100, count)
    return x


def ints(rank: int, count: int) -> np.ndarray:
    return np.random.default_rng(rank).integers(-1000, 1000, count).astype(np.int64)


def floats(rank: int, count: int) -> np.ndarray:
    return np.random.default_rng(50 + rank).standard_normal(count)


def as_bytes(a: np.ndarray) -> memoryview:
    return memoryview(a.view(np.uint8))


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"N{n}")
def world(request):
    w = World(request.param)
    yield w
    w.close()


def run_algo(world, collective, name, make_opts, check=None):
    fn = table.ALGORITHMS[collective][name]

    def body(ch):
        opts = make_opts(ch.rank)
        fn(ch, opts)
        return opts

    return world.run(body)


# ----------------------------------------------------------------- barrier
def test_barrier_waits_for_everyone(world):
    arrived = [False] * world.size
    seen = [None] * world.size
    lock = threading.Lock()

    def body(ch):
        time.sleep(0.01 * ((ch.rank * 7) % 3))
        with lock:
            arrived[ch.rank] = True
        barrier_dissemination.barrier(ch)
        with lock:
            seen[ch.rank] = all(arrived)

    for _ in range(3):
        arrived[:] = [False] * world.size
        world.run(body)
        assert all(seen)


# ------------------------------------------------------------------- bcast
@pytest.mark.parametrize("name", ["binomial", "scatter_allgather"])
def test_bcast(world, name):
    n = world.size
    for nbytes in (0, 1, 13, 1000):
        data = bytes(np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8))
        for segment in SEGMENTS:
            for root in range(n):
                bufs = [bytearray(data) if r == root else bytearray(nbytes) for r in range(n)]
                run_algo(world, "bcast", name, lambda r: BcastOptions(memoryview(bufs[r]), root, segment))
                assert all(bytes(b) == data for b in bufs), (nbytes, segment, root)


def test_bcast_unsized(world):
    n = world.size
    for obj in (None, "x" * 10, {"a": np.arange(20000.0)}):
        for root in range(n):
            out = world.run(
                lambda ch: serialize.loads(
                    bcast_binomial.bcast_unsized(ch, serialize.dumps(obj) if ch.rank == root else None, root)
                )
            )
            for o in out:
                assert repr(o) == repr(obj) if not isinstance(obj, dict) else np.array_equal(o["a"], obj["a"])


# ------------------------------------------------------------------ reduce
@pytest.mark.parametrize("name", ["binomial", "ring_gather"])
def test_reduce(world, name):
    n = world.size
    cases = [("sum", add, ints, True)]
    if name == "binomial":
        cases.append(("affine", affine, affine_data, False))
    for label, combine, data, commute in cases:
        for count in (0, 1, 5, 37):
            inputs = [data(r, count) for r in range(n)]
            expect = affine_fold(inputs) if label == "affine" else np.sum(inputs, axis=0) if n else None
            for segment in SEGMENTS:
                for root in range(n):
                    for in_place in (False, True):
                        recvs = [np.zeros_like(inputs[0]) for _ in range(n)]

                        def make(r):
                            send = inputs[r].copy()
                            if r == root and in_place:
                                recvs[r] = send
                            return ReduceOptions(send, recvs[r] if r == root else None, combine, commute, root, segment)

                        run_algo(world, "reduce", name, make)
                        assert np.array_equal(recvs[root], expect), (label, count, segment, root, in_place)


# --------------------------------------------------------------- allreduce
@pytest.mark.parametrize("name", ["recursive_doubling", "ring", "rabenseifner"])
def test_allreduce(world, name):
    n = world.size
    cases = [("sum-int", add, ints, True), ("sum-float", add, floats, True)]
    if name == "recursive_doubling":
        cases.append(("affine", affine, affine_data, False))
    for label, combine, data, commute in cases:
        for count in (0, 1, 2, 7, 64):
            inputs = [data(r, count) for r in range(n)]
            expect = affine_fold(inputs) if label == "affine" else np.sum(inputs, axis=0)
            for segment in SEGMENTS:
                for in_place in (False, True):
                    sends = [x.copy() for x in inputs]
                    recvs = [s if in_place else np.zeros_like(s) for s in sends]
                    run_algo(world, "allreduce", name, lambda r: AllreduceOptions(sends[r], recvs[r], combine, commute, segment))
                    for r in range(n):
                        assert recvs[r].tobytes() == recvs[0].tobytes(), f"rank {r} differs ({label}, {count})"
                    if label == "sum-float":
                        assert np.allclose(recvs[0], expect)
                    else:
                        assert np.array_equal(recvs[0], expect), (label, count, segment, in_place)
                    if not in_place:
                        assert all(np.array_equal(sends[r], inputs[r]) for r in range(n)), "send buffer written"


@pytest.mark.parametrize("in_place", [False, True], ids=["copy", "in-place"])
def test_a_prepared_allreduce_runs_again_on_new_values(world, in_place):
    """``table.prepare`` plans recursive doubling once (a repeated Allreduce keeps the plan): each later
    run reduces the values its arrays hold then, in rank order, on every N (fold-in included)."""
    n = world.size
    sends = [np.zeros(3, AFFINE) for _ in range(n)]
    recvs = [s if in_place else np.zeros(3, AFFINE) for s in sends]
    plans: dict[int, object] = {}

    def body(ch):
        if ch.rank not in plans:
            opts = AllreduceOptions(sends[ch.rank], recvs[ch.rank], affine, False, SEGMENTS[0])
            plans[ch.rank] = table.prepare("allreduce", "recursive_doubling", ch, opts)
        plans[ch.rank](ch)

    for round_ in range(3):
        inputs = [affine_data(r + 10 * round_, 3) for r in range(n)]
        for r in range(n):
            sends[r][:] = inputs[r]
        world.run(body)
        for r in range(n):
            assert np.array_equal(recvs[r], affine_fold(inputs)), (round_, r)


# ---------------------------------------------------------- reduce_scatter
@pytest.mark.parametrize("name", ["allreduce", "ring", "reduce"])
def test_reduce_scatter(world, name):
    n = world.size
    cases = [("sum", add, ints, True)]
    if name == "reduce":
        cases.append(("affine", affine, affine_data, False))
    for label, combine, data, commute in cases:
        for counts in ([0] * n, [3] * n, [(r * 5) % 4 for r in range(n)]):
            total = sum(counts)
            inputs = [data(r, total) for r in range(n)]
            expect = affine_fold(inputs) if label == "affine" else np.sum(inputs, axis=0)
            starts = np.cumsum([0] + counts)
            for segment in SEGMENTS:
                for scratch_ok in (False, True):
                    sends = [x.copy() for x in inputs]
                    recvs = [np.zeros(counts[r], inputs[0].dtype) for r in range(n)]
                    run_algo(
                        world,
                        "reduce_scatter",
                        name,
                        lambda r: ReduceScatterOptions(sends[r], recvs[r], counts, combine, commute, segment, scratch_ok),
                    )
                    for r in range(n):
                        assert np.array_equal(recvs[r], expect[starts[r] : starts[r + 1]]), (label, counts, r)


# --------------------------------------------------------------- allgather
def layouts(n: int, seed: int):
    rng = np.random.default_rng(seed)
    yield "even", Layout.even(n, 6)
    yield "empty", Layout.even(n, 0)
    lengths = [int(x) for x in rng.integers(0, 9, n)]
    yield "uneven", Layout.packed(lengths)
    # Scattered: blocks in a permuted order with gaps between them.
    order = rng.permutation(n)
    offsets = [0] * n
    pos = 3
    for i in order:
        offsets[i] = pos
        pos += lengths[i] + 2
    yield "scattered", Layout(offsets, lengths)


def fill(layout: Layout, n: int, only: int | None = None) -> bytearray:
    end = max((o + l for o, l in zip(layout.offsets, layout.lengths)), default=0) + 4
    buf = bytearray(b"\xee" * end)
    for r in range(n):
        if only is None or r == only:
            o, l = layout.offsets[r], layout.lengths[r]
            buf[o : o + l] = bytes((r * 31 + k) % 251 for k in range(l))
    return buf


@pytest.mark.parametrize("name", ["recursive_doubling", "ring"])
def test_allgather(world, name):
    n = world.size
    for label, layout in layouts(n, n):
        expect = fill(layout, n)
        for segment in (1, 4, 1 << 20):
            bufs = [fill(layout, n, only=r) for r in range(n)]
            run_algo(world, "allgather", name, lambda r: AllgatherOptions(memoryview(bufs[r]), layout, segment))
            for r in range(n):
                assert bufs[r] == expect, (label, segment, r)


def test_allgather_objects(world):
    n = world.size
    objs = [{"rank": r, "pad": "x" * (r * 100)} for r in range(n)]
    out = world.run(
        lambda ch: [serialize.loads(v) for v in allgather_recursive_doubling.allgather_objects(ch, serialize.dumps(objs[ch.rank]))]
    )
    assert all(o == objs for o in out)


# ---------------------------------------------------------- gather/scatter
@pytest.mark.parametrize("name", ["binomial", "linear"])
def test_gather(world, name):
    n = world.size
    for block in (0, 1, 5):
        layout = Layout.even(n, block)
        expect = fill(layout, n)
        for root in range(n):
            for in_place in (False, True):
                recvs = [fill(layout, n, only=r if in_place else -1) for r in range(n)]
                sends = [bytes(fill(layout, n, only=r))[r * block : (r + 1) * block] for r in range(n)]

                def make(r):
                    send = None if (in_place and r == root) else memoryview(sends[r])
                    return GatherOptions(send, memoryview(recvs[r]) if r == root else None, layout if r == root else None, block, root)

                run_algo(world, "gather", name, make)
                assert recvs[root] == expect, (block, root, in_place)
    if name == "linear":  # Gatherv layouts
        for label, layout in layouts(n, 7):
            expect = fill(layout, n)
            for root in range(n):
                recvs = [fill(layout, n, only=-1) for _ in range(n)]
                full = fill(layout, n)
                sends = [bytes(layout.view(memoryview(full), r)) for r in range(n)]
                run_algo(
                    world,
                    "gather",
                    "linear",
                    lambda r: GatherOptions(memoryview(sends[r]), memoryview(recvs[r]) if r == root else None, layout if r == root else None, -1, root),
                )
                assert recvs[root] == expect, (label, root)


@pytest.mark.parametrize("name", ["binomial", "linear"])
def test_scatter(world, name):
    n = world.size
    for block in (0, 1, 5):
        layout = Layout.even(n, block)
        full = fill(layout, n)
        for root in range(n):
            for in_place in (False, True):
                recvs = [bytearray(block) for _ in range(n)]

                def make(r):
                    recv = None if (in_place and r == root) else memoryview(recvs[r])
                    return ScatterOptions(memoryview(full) if r == root else None, layout if r == root else None, recv, block, root)

                run_algo(world, "scatter", name, make)
                for r in range(n):
                    if not (in_place and r == root):
                        assert bytes(recvs[r]) == bytes(layout.view(memoryview(full), r)), (block, root, r)
    if name == "linear":
        for label, layout in layouts(n, 11):
            full = fill(layout, n)
            for root in range(n):
                recvs = [bytearray(layout.lengths[r]) for r in range(n)]
                run_algo(
                    world,
                    "scatter",
                    "linear",
                    lambda r: ScatterOptions(memoryview(full) if r == root else None, layout if r == root else None, memoryview(recvs[r]), -1, root),
                )
                for r in range(n):
                    assert bytes(recvs[r]) == bytes(layout.view(memoryview(full), r)), (label, root, r)


def test_gather_scatter_objects(world):
    n = world.size
    objs = [("r", r, "y" * r * 50) for r in range(n)]
    for root in range(n):
        out = world.run(lambda ch: gather_binomial.gather_objects(ch, serialize.dumps(objs[ch.rank]), root))
        assert [serialize.loads(v) for v in out[root]] == objs
        assert all(o is None for r, o in enumerate(out) if r != root)
        got = world.run(
            lambda ch: serialize.loads(
                scatter_binomial.scatter_objects(ch, [serialize.dumps(o) for o in objs] if ch.rank == root else None, root)
            )
        )
        assert got == objs


# ---------------------------------------------------------------- alltoall
def test_alltoall(world):
    n = world.size
    for window in (1, 2, n):
        for block in (0, 3):
            layout = Layout.even(n, block)
            sends = [bytes((r * 16 + d) % 256 for d in range(n) for _ in range(block)) for r in range(n)]
            recvs = [bytearray(n * block) for _ in range(n)]
            run_algo(
                world,
                "alltoall",
                "pairwise",
                lambda r: AlltoallOptions(memoryview(sends[r]), layout, memoryview(recvs[r]), layout, window),
            )
            for r in range(n):
                assert bytes(recvs[r]) == bytes((s * 16 + r) % 256 for s in range(n) for _ in range(block))
    # Alltoallv: rank s sends (s + d) % 3 bytes to d, in a scattered send layout.
    counts = [[(s + d) % 3 for d in range(n)] for s in range(n)]
    send_layouts = [Layout([5 * d for d in range(n)][::-1][::-1], counts[s]) for s in range(n)]
    recv_layouts = [Layout.packed([counts[s][d] for s in range(n)]) for d in range(n)]
    sends = [bytes((s * 10 + d) % 256 for d in range(n) for _ in range(5)) for s in range(n)]
    recvs = [bytearray(sum(recv_layouts[d].lengths)) for d in range(n)]
    run_algo(
        world,
        "alltoall",
        "pairwise",
        lambda r: AlltoallOptions(memoryview(sends[r]), send_layouts[r], memoryview(recvs[r]), recv_layouts[r], 2),
    )
    for d in range(n):
        assert bytes(recvs[d]) == b"".join(bytes([(s * 10 + d) % 256]) * counts[s][d] for s in range(n))


def test_alltoall_objects(world):
    n = world.size
    out = world.run(
        lambda ch: [
            serialize.loads(v)
            for v in alltoall_pairwise.alltoall_objects(ch, [serialize.dumps((ch.rank, d)) for d in range(n)])
        ]
    )
    for d in range(n):
        assert out[d] == [(s, d) for s in range(n)]


# -------------------------------------------------------------------- scan
@pytest.mark.parametrize("exclusive", [False, True], ids=["scan", "exscan"])
def test_scan(world, exclusive):
    n = world.size
    for label, combine, data in (("sum", add, ints), ("affine", affine, affine_data)):
        for count in (0, 1, 9):
            inputs = [data(r, count) for r in range(n)]
            for in_place in (False, True):
                sends = [x.copy() for x in inputs]
                sentinel = [np.zeros_like(x) for x in inputs]
                recvs = [s if in_place else z for s, z in zip(sends, sentinel)]
                run_algo(world, "scan", "recursive_doubling", lambda r: ScanOptions(sends[r], recvs[r], combine, exclusive))
                for r in range(n):
                    upto = inputs[: r] if exclusive else inputs[: r + 1]
                    if not upto:
                        continue  # exscan leaves rank 0's buffer alone
                    expect = affine_fold(upto) if label == "affine" else np.sum(upto, axis=0)
                    assert np.array_equal(recvs[r], expect), (label, count, in_place, r)


def test_object_reductions(world):
    n = world.size
    words = [f"<{r}>" for r in range(n)]
    cat = lambda a, b: a + b
    for root in range(n):
        out = world.run(lambda ch: reduce_binomial.reduce_objects(ch, words[ch.rank], cat, root))
        assert out[root] == "".join(words)
        assert all(o is None for r, o in enumerate(out) if r != root)
    out = world.run(lambda ch: allreduce_recursive_doubling.allreduce_objects(ch, words[ch.rank], cat))
    assert out == ["".join(words)] * n
    out = world.run(lambda ch: scan_recursive_doubling.scan_objects(ch, words[ch.rank], cat, False))
    assert out == ["".join(words[: r + 1]) for r in range(n)]
    out = world.run(lambda ch: scan_recursive_doubling.scan_objects(ch, words[ch.rank], cat, True))
    assert out == [None] + ["".join(words[:r]) for r in range(1, n)]


# ------------------------------------------------------------------ the table
def test_table_choices_and_overrides(monkeypatch):
    try:
        monkeypatch.setenv("FMPI_COLL_ALGO", "allreduce:ring,gather:binomial")
        monkeypatch.setenv("FMPI_COLL_SEGMENT", "4K")
        table.reset()
        assert table.tuning().segment == 4096
        assert table.choose("allreduce", 8, 4) == "ring"
        assert table.choose("allreduce", 8, 4, commute=False) == "recursive_doubling"  # forced ring cannot run
        assert table.choose("gather", 1 << 30, 4, equal_blocks=False) == "linear"
        monkeypatch.delenv("FMPI_COLL_ALGO")
        monkeypatch.delenv("FMPI_COLL_SEGMENT")
        monkeypatch.setenv("FMPI_NETWORK", "host")  # the thresholds measured on one host (test_cost_model: networks)
        table.reset()
        t = table.tuning()
        assert table.choose("allreduce", t.allreduce_ring_min, 4) == "ring"
        assert table.choose("allreduce", t.allreduce_ring_min - 1, 4) == "rabenseifner"
        assert table.choose("allreduce", t.allreduce_large_min, 3) == "rabenseifner"
        assert table.choose("allreduce", t.allreduce_large_min - 1, 8) == "recursive_doubling"
        assert table.choose("allreduce", t.allreduce_ring_min, 8, commute=False) == "recursive_doubling"
        assert table.choose("allreduce", 1 << 30, 1) == "recursive_doubling"
        assert table.choose("reduce_scatter", 1 << 30, 4, commute=False) == "reduce"
        assert table.choose("bcast", 1 << 30, 4) == "binomial"
        table.configure(bcast_large=0)
        assert table.choose("bcast", 1, 4) == "scatter_allgather"
        assert table.choose("bcast", 1, 2) == "binomial"
        with pytest.raises(ValueError, match="unknown algorithm"):
            table.configure("allreduce:quantum")
        monkeypatch.setenv("FMPI_COLL_SEGMENT", "lots")
        with pytest.raises(ValueError, match="FMPI_COLL_SEGMENT"):
            table.reset()
    finally:
        monkeypatch.delenv("FMPI_COLL_SEGMENT", raising=False)
        monkeypatch.delenv("FMPI_NETWORK", raising=False)
        table.reset()
