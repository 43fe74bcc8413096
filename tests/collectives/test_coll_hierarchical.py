"""The hierarchical allreduce, bcast and reduce (ranks sharing machines: K ranks per Lambda function), in-process.

'Machines' are simulated by the layout the algorithm reads (blocks of ``per_node`` consecutive ranks, as
FMPI_RANKS_PER_NODE says): real engines over loopback, one thread per rank (coll_harness.World).
"""

from __future__ import annotations

import numpy as np
import pytest
from coll_harness import World

from fmpi import settings
from fmpi.collectives import (
    allreduce_hierarchical,
    allreduce_ring,
    bcast_binomial,
    bcast_hierarchical,
    reduce_binomial,
    reduce_hierarchical,
    table,
)
from fmpi.collectives.channel import Channel
from fmpi.collectives.options import AllreduceOptions, BcastOptions, ReduceOptions


def add(lower, higher, out):
    np.add(lower, higher, out=out)


@pytest.fixture(scope="module", params=[3, 4, 5, 7, 8], ids=lambda n: f"N{n}")
def world(request):
    w = World(request.param)
    yield w
    w.close()


@pytest.mark.parametrize("per_node", [2, 3, 4])
def test_results_are_the_flat_allreduces(world, per_node):
    n = world.size
    for dtype in (np.int64, np.float64):
        for count in (0, 1, 7, 1000):
            inputs = [(np.random.default_rng(r).standard_normal(count) * 1000).astype(dtype) for r in range(n)]
            for in_place in (False, True):
                sends = [x.copy() for x in inputs]
                recvs = [s if in_place else np.zeros_like(s) for s in sends]
                flat = [x.copy() for x in inputs]

                def hier(ch):
                    opts = AllreduceOptions(sends[ch.rank], recvs[ch.rank], add, True, 64)
                    allreduce_hierarchical.allreduce(ch, opts, per_node)

                world.run(hier)
                world.run(lambda ch: allreduce_ring.allreduce(ch, AllreduceOptions(flat[ch.rank], flat[ch.rank], add,
                                                                                    True, 64)))
                # every rank holds the same bits, and they are the flat allreduce's (exactly, for integers)
                assert all(recvs[r].tobytes() == recvs[0].tobytes() for r in range(n)), (per_node, count)
                if dtype is np.int64:
                    assert np.array_equal(recvs[0], flat[0]) and np.array_equal(recvs[0], np.sum(inputs, axis=0))
                else:
                    assert np.allclose(recvs[0], flat[0])
                if not in_place:
                    assert all(np.array_equal(sends[r], inputs[r]) for r in range(n)), "send buffer written"


def test_members_talk_only_to_their_leader():
    """What the hierarchy is for: a rank that is not its machine's leader sends nothing across machines."""
    w = World(6)
    try:
        data = [np.full(1 << 16, r, np.int64) for r in range(6)]
        w.run(lambda ch: allreduce_hierarchical.allreduce(ch, AllreduceOptions(data[ch.rank], data[ch.rank], add,
                                                                                True, 1 << 20), 3))
        assert all(np.array_equal(d, np.full(1 << 16, 15)) for d in data)
        for member in (1, 2, 4, 5):
            leader = member // 3 * 3
            peers = {s["peer"] for s in w.engines[member].link_stats()}
            assert peers == {leader}, (member, peers)
    finally:
        w.close()


@pytest.mark.parametrize("per_node", [2, 3, 4])
def test_bcast_and_reduce_give_the_flat_results_from_every_root(world, per_node):
    n = world.size
    for count in (0, 1, 1000):
        for root in range(n):
            data = [np.arange(count, dtype=np.int64) * (root + 1) if r == root else np.zeros(count, np.int64)
                    for r in range(n)]
            world.run(lambda ch: bcast_hierarchical.bcast(ch, BcastOptions(memoryview(data[ch.rank]).cast("B"),
                                                                           root, 64), per_node))
            assert all(np.array_equal(d, data[root]) for d in data), (per_node, count, root)

            inputs = [np.random.default_rng(r).integers(-1000, 1000, count) for r in range(n)]
            for in_place in (False, True):
                out = [inputs[r].copy() if in_place and r == root else np.full(count, -7) for r in range(n)]
                world.run(lambda ch: reduce_hierarchical.reduce(ch, ReduceOptions(
                    out[ch.rank] if in_place and ch.rank == root else inputs[ch.rank],
                    out[ch.rank] if ch.rank == root else None, add, True, root, 64), per_node))
                assert np.array_equal(out[root], np.sum(inputs, axis=0)), (per_node, count, root, in_place)
                assert all(np.array_equal(out[r], np.full(count, -7)) for r in range(n) if r != root)


class _Crossings:
    """Bytes that cross between machines (blocks of `per_node` world ranks), counted at every send."""

    def __init__(self, monkeypatch, per_node: int) -> None:
        self.into: dict[int, int] = {}  # machine -> bytes it received from other machines
        self.out: dict[int, int] = {}
        isend = Channel.isend

        def counting(ch, dest, *parts):
            src, dst = ch.world_rank(ch.rank) // per_node, ch.world_rank(dest) // per_node
            if src != dst:
                nbytes = sum(memoryview(p).nbytes for p in parts)
                self.into[dst] = self.into.get(dst, 0) + nbytes
                self.out[src] = self.out.get(src, 0) + nbytes
            return isend(ch, dest, *parts)

        monkeypatch.setattr(Channel, "isend", counting)


def test_each_machine_gets_the_broadcast_once_and_sends_one_partial(monkeypatch):
    """What the hierarchy is for, with a root inside a machine (8 ranks as 3 + 3 + 2): a flat binomial tree
    sends the vector into a machine more than once; the hierarchical forms move one vector per machine
    (with the same tree between machines: the table may pick one that splits the vector)."""
    w = World(8)
    try:
        per_node, root, count = 3, 4, 1 << 12
        nbytes = count * 8
        sent = {}
        for label, run in (("flat", bcast_binomial.bcast),
                           ("hier", lambda ch, o: bcast_hierarchical.bcast(ch, o, per_node, bcast_binomial.bcast))):
            crossings = _Crossings(monkeypatch, per_node)
            data = [np.full(count, root if r == root else 0, np.int64) for r in range(8)]
            w.run(lambda ch: run(ch, BcastOptions(memoryview(data[ch.rank]).cast("B"), root, 1 << 20)))
            assert all(np.array_equal(d, np.full(count, root)) for d in data)
            sent[label] = crossings.into
        assert sent["hier"] == {0: nbytes, 2: nbytes}, sent
        assert sum(sent["flat"].values()) > 2 * nbytes, sent  # (the case the hierarchy exists for)

        for label, run in (("flat", reduce_binomial.reduce),
                           ("hier", lambda ch, o: reduce_hierarchical.reduce(ch, o, per_node, reduce_binomial.reduce))):
            crossings = _Crossings(monkeypatch, per_node)
            inputs = [np.full(count, r, np.int64) for r in range(8)]
            out = np.zeros(count, np.int64)
            w.run(lambda ch: run(ch, ReduceOptions(inputs[ch.rank], out if ch.rank == root else None, add, True,
                                                   root, 1 << 20)))
            assert np.array_equal(out, np.full(count, 28))
            sent[label] = crossings.out
        assert sent["hier"] == {0: nbytes, 2: nbytes}, sent
        assert sum(sent["flat"].values()) > 2 * nbytes, sent
    finally:
        w.close()


def test_a_forced_hierarchy_runs_the_table_s_choice_between_machines(monkeypatch):
    """FMPI_COLL_ALGO=...:hierarchical forces the hierarchy; its step across machines still takes a flat
    algorithm (it once picked the forced hierarchy again, on a channel of one rank per machine)."""
    monkeypatch.setenv("FMPI_RANKS_PER_NODE", "2")
    monkeypatch.setenv("FMPI_COLL_ALGO", "allreduce:hierarchical,bcast:hierarchical,reduce:hierarchical")
    settings.reload()
    table.reset()
    w = World(4)
    try:
        data = [np.full(8, r, np.int64) for r in range(4)]
        names = w.run(lambda ch: table.run("allreduce", ch, AllreduceOptions(data[ch.rank], data[ch.rank], add,
                                                                             True, 64), 64))
        assert names == ["hierarchical"] * 4 and all(np.array_equal(d, np.full(8, 6)) for d in data)
        buf = [np.full(8, 9 if r == 3 else 0, np.int64) for r in range(4)]
        names = w.run(lambda ch: table.run("bcast", ch, BcastOptions(memoryview(buf[ch.rank]).cast("B"), 3, 64),
                                           64))
        assert names == ["hierarchical"] * 4 and all(np.array_equal(b, np.full(8, 9)) for b in buf)
        out = np.zeros(8, np.int64)
        names = w.run(lambda ch: table.run("reduce", ch, ReduceOptions(data[ch.rank], out if ch.rank == 1 else None,
                                                                       add, True, 1, 64), 64))
        assert names == ["hierarchical"] * 4 and np.array_equal(out, np.full(8, 24))
    finally:
        monkeypatch.delenv("FMPI_RANKS_PER_NODE")
        monkeypatch.delenv("FMPI_COLL_ALGO")
        settings.reload()
        table.reset()
        w.close()


def test_the_table_picks_it_when_ranks_share_machines(monkeypatch):
    w = World(4)
    try:
        picks = {}

        def pick(label, commute=True):
            picks[label] = w.run(lambda ch: table.pick("allreduce", ch, None, 1 << 20, commute))[0]
            picks[label + " bcast"] = w.run(lambda ch: table.pick("bcast", ch, None, 1 << 20))[0]
            picks[label + " reduce"] = w.run(lambda ch: table.pick("reduce", ch, None, 1 << 20, commute))[0]

        pick("one per machine")
        monkeypatch.setenv("FMPI_RANKS_PER_NODE", "2")
        settings.reload()
        table.reset()
        pick("two per machine")
        pick("not commutative", commute=False)
        monkeypatch.setenv("FMPI_RANKS_PER_NODE", "4")  # one machine: nothing to save
        settings.reload()
        pick("all on one")
        monkeypatch.setenv("FMPI_RANKS_PER_NODE", "2")
        monkeypatch.setenv("FMPI_COLL_ALGO", "allreduce:ring")
        settings.reload()
        table.reset()
        pick("forced")
        for coll in ("", " bcast", " reduce"):
            assert picks["two per machine" + coll] == "hierarchical", picks
            assert picks["one per machine" + coll] != "hierarchical", picks
            assert picks["all on one" + coll] != "hierarchical", picks
        assert picks["not commutative"] != "hierarchical" and picks["not commutative reduce"] != "hierarchical"
        assert picks["not commutative bcast"] == "hierarchical"  # (a broadcast folds nothing)
        assert picks["forced"] == "ring" and picks["forced bcast"] == "hierarchical"
    finally:
        monkeypatch.delenv("FMPI_RANKS_PER_NODE")
        monkeypatch.delenv("FMPI_COLL_ALGO", raising=False)
        settings.reload()
        table.reset()
        w.close()


@pytest.mark.parametrize("per_node", ["2", "1"])
def test_a_local_job_simulates_functions_with_the_layout(per_node):
    """fmpirun -n 4 with FMPI_RANKS_PER_NODE=2 (two 'functions' of two ranks): right sums, and the ranks that
    lead no function linked to their leader only; with 1 (no sharing) the flat algorithm links them across."""
    import json
    import os

    from tests_support import REPO, run_fmpi

    program = REPO / "tests" / "lambda" / "programs" / "hier_allreduce.py"
    run = run_fmpi(4, program, env={**os.environ, "FMPI_RANKS_PER_NODE": per_node})
    assert run.returncode == 0, run.stderr
    lines = {line["rank"]: line for line in map(json.loads, run.lines())}
    assert all(lines[r]["right"] for r in range(4)), lines
    only_leader = lines[1]["peers"] == [0] and lines[3]["peers"] == [2]
    assert only_leader == (per_node == "2"), lines
