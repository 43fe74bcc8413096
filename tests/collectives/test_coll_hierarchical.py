"""The hierarchical allreduce (ranks sharing machines: K ranks per Lambda function), in-process.

'Machines' are simulated by the layout the algorithm reads (blocks of ``per_node`` consecutive ranks, as
FMPI_RANKS_PER_NODE says): real engines over loopback, one thread per rank (coll_harness.World).
"""

from __future__ import annotations

import numpy as np
import pytest
from coll_harness import World

from fmpi import settings
from fmpi.collectives import allreduce_hierarchical, allreduce_ring, table
from fmpi.collectives.options import AllreduceOptions


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


def test_the_table_picks_it_when_ranks_share_machines(monkeypatch):
    w = World(4)
    try:
        picks = {}

        def pick(label, commute=True):
            picks[label] = w.run(lambda ch: table.pick("allreduce", ch, None, 1 << 20, commute))[0]

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
        assert picks["two per machine"] == "hierarchical"
        assert "hierarchical" not in (picks["one per machine"], picks["not commutative"], picks["all on one"])
        assert picks["forced"] == "ring"
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
