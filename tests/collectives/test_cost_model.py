"""The collectives table on a network: algorithms chosen by the α-β-γ model (collectives/cost_model.py).

On one host (FMPI_NETWORK=host, what fmpirun sets for local ranks) the
measured thresholds stay; between hosts (the default, a Lambda-shaped
network) the model picks the bandwidth algorithms the loopback thresholds
never chose. Knobs and forced algorithms still win.
"""

from __future__ import annotations

import os

import pytest

from fmpi import settings
from fmpi.collectives import cost_model, table

KiB, MiB = 1 << 10, 1 << 20
LAMBDA = cost_model.Network(*settings.LAMBDA_NETWORK)


@pytest.fixture
def network(monkeypatch):
    """Set FMPI_NETWORK (and other variables) and reload the table; the table is reset afterwards."""

    def use(value: str, **more: str) -> None:
        monkeypatch.setenv("FMPI_NETWORK", value)
        for name, v in more.items():
            monkeypatch.setenv(name, v)
        table.reset()

    yield use
    for name in ("FMPI_NETWORK", "FMPI_COLL_BCAST_LARGE", "FMPI_COLL_ALGO", "FMPI_CHANNEL"):
        monkeypatch.delenv(name, raising=False)
    table.reset()


def test_a_lambda_network_gets_the_bandwidth_algorithms_for_large_vectors(network):
    network("lambda")
    assert table.choose("bcast", 16 * MiB, 8) == "scatter_allgather"
    assert table.choose("bcast", 1 * MiB, 32) == "scatter_allgather"
    assert table.choose("reduce", 16 * MiB, 8) == "ring_gather"
    assert table.choose("allreduce", 1 * MiB, 8) == "rabenseifner"
    assert table.choose("allreduce", 1 * MiB, 2) == "rabenseifner"  # a tie with the ring on paper: the first wins
    assert table.choose("allreduce", 16 * MiB, 8) == "ring"  # fmpi's large exchanges run at half rate
    assert table.choose("reduce_scatter", 16 * MiB, 8) == "ring"
    # small vectors: the fewest rounds
    assert table.choose("bcast", 8, 8) == "binomial"
    assert table.choose("allreduce", 8, 32) == "recursive_doubling"
    assert table.choose("reduce", 8, 8) == "binomial"
    # what cannot run is never chosen
    assert table.choose("allreduce", 16 * MiB, 8, commute=False) == "recursive_doubling"
    assert table.choose("reduce", 16 * MiB, 8, commute=False) == "binomial"
    assert table.choose("reduce_scatter", 16 * MiB, 8, commute=False) == "reduce"


def test_one_host_keeps_the_measured_thresholds(network):
    network("host")
    t = table.tuning()
    assert table.choose("bcast", 1 << 30, 8) == "binomial"
    assert table.choose("reduce", 1 << 30, 8) == "binomial"
    assert table.choose("allreduce", t.allreduce_large_min - 1, 8) == "recursive_doubling"
    assert table.choose("allreduce", t.allreduce_ring_min, 8) == "ring"


def test_a_relayed_job_keeps_the_thresholds_too(network):
    """Every byte of a relayed job crosses the one relay: a shared medium, like one host."""
    network("lambda", FMPI_CHANNEL="relay")
    assert table.choose("bcast", 1 << 30, 8) == "binomial"


def test_knobs_and_forced_algorithms_still_win_on_a_network(network):
    network("lambda", FMPI_COLL_BCAST_LARGE="1G", FMPI_COLL_ALGO="allreduce:ring")
    assert table.choose("bcast", 16 * MiB, 8) == "binomial"  # the knob puts bcast back on its threshold
    assert table.choose("allreduce", 8, 8) == "ring"
    assert table.choose("reduce", 16 * MiB, 8) == "ring_gather"  # untouched collectives: still the model
    table.configure(allreduce_large_min=0)
    table.configure(forced={})
    assert table.choose("allreduce", 8, 8) == "rabenseifner"  # a knob set from Python counts too


def test_a_custom_network_moves_the_crossovers(network):
    """A faster, lower-latency network than Lambda's: the tree bcast keeps larger vectors."""
    network("lambda")
    on_lambda = table.choose("bcast", 256 * KiB, 8)
    network("alpha=2000,bandwidth=100000")
    assert (on_lambda, table.choose("bcast", 256 * KiB, 8)) == ("scatter_allgather", "binomial")


def test_the_model_prefers_fewer_rounds_when_bytes_are_equal():
    """Rabenseifner and the ring move the same bytes; the ring takes 2(N-1) rounds instead of 2 log2 N."""
    rab = cost_model.estimate("allreduce", "rabenseifner", 1 * MiB, 16, LAMBDA)
    ring = cost_model.estimate("allreduce", "ring", 1 * MiB, 16, LAMBDA)
    assert ring - rab == pytest.approx((2 * 15 - 2 * 4) * LAMBDA.alpha)
    # and the bandwidth term of the optimal algorithms is the lower bound's 2(N-1)/N n beta
    assert rab == pytest.approx(8 * LAMBDA.alpha + 2 * 15 / 16 * MiB * LAMBDA.beta + 15 / 16 * MiB * LAMBDA.gamma)


def test_exchanges_above_the_eager_limit_count_their_bytes_twice():
    """Measured in the shaped lab: one 16 MiB exchange took 420-640 ms where the link allows 216 ms."""
    one = cost_model.estimate("allreduce", "recursive_doubling", 16 * MiB, 2, LAMBDA)
    assert one == pytest.approx(LAMBDA.alpha + 2 * 16 * MiB * LAMBDA.beta + 16 * MiB * LAMBDA.gamma)


def test_fmpirun_marks_local_ranks_as_one_host(fmpi, tmp_path):
    """Local ranks share this machine: FMPI_NETWORK=host unless the user chose a network."""
    program = tmp_path / "network.py"
    program.write_text("from mpi4py import MPI\nfrom fmpi import settings\nprint(MPI.COMM_WORLD.rank, settings.current().network is None)\n")
    env = {k: v for k, v in os.environ.items() if k != "FMPI_NETWORK"}
    local = fmpi(2, program, env=env)
    chosen = fmpi(2, program, env={**env, "FMPI_NETWORK": "alpha=50,bandwidth=1000"})
    assert (local.returncode, chosen.returncode) == (0, 0), local.stderr + chosen.stderr
    assert sorted(local.stdout.split()) == sorted(["0", "1", "True", "True"])
    assert sorted(chosen.stdout.split()) == sorted(["0", "1", "False", "False"])


def test_model_chosen_algorithms_give_exact_results_in_a_job(check):
    """16 MiB bcast, reduce and allreduce through the network's choices (scatter-allgather, ring-gather,
    Rabenseifner) in a real job: every rank checks its result exactly."""
    assert check("check_large.py", 4, env={"FMPI_NETWORK": "lambda"}) > 0


@pytest.mark.parametrize("text, expect", [
    ("host", None), ("lambda", settings.LAMBDA_NETWORK), ("alpha=50,bandwidth=10000,reduce=4", (50e-6, 8e-10, 0.25e-9)),
])
def test_fmpi_network_values(text, expect):
    got = settings.read({"FMPI_NETWORK": text}).network
    assert got == expect if expect is None else got == pytest.approx(expect)


@pytest.mark.parametrize("text", ["fast", "alpha=1", "alpha=x,bandwidth=1", "alpha=1,bandwidth=0", "alpha=1,bandwidth=2,speed=3"])
def test_bad_fmpi_network_is_one_clear_error(text):
    with pytest.raises(ValueError, match="FMPI_NETWORK must be lambda, host or alpha=US,bandwidth=MBIT"):
        settings.read({"FMPI_NETWORK": text})
