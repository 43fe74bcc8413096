"""Several ranks per function (issue 27 item 2): ``fmpirun --ranks-per-function K`` on emulated Lambda.

One invocation runs K ranks: its own in the handler's process, the others as processes it starts
(``lambda_runtime/siblings.py``). What must hold, seen from outside: ceil(N/K) invocations, every rank
a process of its own with its output and exit status, COMM_TYPE_SHARED grouping the ranks of one
invocation, a rank that dies ending the job with its number, and no process left when the job ends.
"""

from __future__ import annotations

import json
import os

import pytest
from lambda_testing import PROGRAMS

PER_FUNCTION = PROGRAMS / "per_function.py"
# The first job of a session packages fmpi: over two minutes on a loaded 2-core machine, then a deploy.
SLOW_FIRST = 420.0


def _events(moto, before: int) -> list[dict]:
    assert moto.ctrl.wait_idle(30)  # (an invocation's record is made when it ends)
    return [r for r in moto.ctrl.history[before:] if r["type"] == "Event"]


@pytest.mark.parametrize("n, k, groups", [(4, 2, [[0, 1], [2, 3]]), (3, 2, [[0, 1], [2]])])
def test_k_ranks_run_in_one_invocation_and_share_a_node(lambda_run, moto, tmp_path, n, k, groups):
    before = len(moto.ctrl.history)
    cost = tmp_path / "cost.json"
    run = lambda_run(n, PER_FUNCTION, extra=("--ranks-per-function", str(k), "--report", str(cost)),
                     timeout=SLOW_FIRST)
    assert run.returncode == 0, run.stderr
    lines = {line["rank"]: line for line in map(json.loads, run.lines())}
    assert sorted(lines) == list(range(n))
    assert len({line["pid"] for line in lines.values()}) == n  # every rank is a process of its own
    for group in groups:
        for rank in group:
            line = lines[rank]
            # mpi4py's semantics: the node communicator holds the ranks of one function, ordered by key
            assert line["members"] == group and line["node_size"] == len(group), line
            assert line["node_rank"] == group.index(rank) and line["node_sum"] == sum(group), line
            assert line["world_sum"] == sum(range(n))
    events = _events(moto, before)
    assert len(events) == len(groups), "one invocation per function: ceil(N/K)"
    summaries = sorted((json.loads(r["payload"]) for r in events), key=lambda s: s["rank"])
    assert [s["rank"] for s in summaries] == [g[0] for g in groups]
    # The head reaped its siblings, and each ended having finished its rank (status 0)
    assert [s.get("siblings", {}) for s in summaries] == [{str(r): 0 for r in g[1:]} for g in groups]
    # The cost report bills each invocation once (its ranks share its request id), and every rank's status
    totals = json.loads(cost.read_text())["totals"]
    assert totals["invocations"] == totals["from_report_lines"] == 1 + len(groups), totals  # (and the ping)
    # The progress lines count invocations against the invocations made, ranks against N
    assert f"invoked {len(groups)}/{len(groups)}" in run.stderr and f"joined {n}/{n}" in run.stderr, run.stderr
    assert totals["requests"] == 1 + len(groups), totals


def test_one_rank_per_function_gives_singleton_nodes(lambda_run, moto):
    """Without --ranks-per-function (1769 MB: one vCPU) every rank is its own function, whatever the host says."""
    run = lambda_run(2, PER_FUNCTION, timeout=SLOW_FIRST)
    assert run.returncode == 0, run.stderr
    assert sorted(json.loads(line)["members"] for line in run.lines()) == [[0], [1]]


def test_a_siblings_exit_status_is_the_jobs(lambda_run, moto):
    run = lambda_run(2, PROGRAMS / "exit_code.py", extra=("--ranks-per-function", "2"))  # rank 1: sys.exit(4)
    assert run.returncode == 4, run.stderr
    assert "rank 1 exited with status 4" in run.stderr, run.stderr


def test_a_sibling_that_dies_ends_the_job_and_names_its_rank(lambda_run, moto):
    run = lambda_run(2, PROGRAMS / "crash.py", extra=("--ranks-per-function", "2"))  # rank 1: os._exit(3)
    assert run.returncode != 0
    assert "rank 1" in run.stderr, run.stderr
    # (the moto fixture then checks that no invocation is still running)


def test_no_sibling_outlives_its_invocation(lambda_run, moto):
    run = lambda_run(4, PER_FUNCTION, extra=("--ranks-per-function", "4"))
    assert run.returncode == 0, run.stderr
    assert moto.ctrl.wait_idle(30)
    for line in map(json.loads, run.lines()):
        with pytest.raises(ProcessLookupError):
            os.kill(line["pid"], 0)


@pytest.mark.parametrize("value, words", [("0", "--ranks-per-function must be at least 1 (got 0)"),
                                          ("-2", "--ranks-per-function must be at least 1 (got -2)")])
def test_bad_ranks_per_function_are_refused(lambda_run, moto, value, words):
    run = lambda_run(2, PROGRAMS / "hello.py", extra=("--ranks-per-function", value))
    assert run.returncode == 2 and words in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_spares_need_one_rank_per_function(lambda_run, moto):
    run = lambda_run(2, PROGRAMS / "hello.py", extra=("--ranks-per-function", "2", "--spare", "1"))
    assert run.returncode == 2 and "--spare" in run.stderr and "--ranks-per-function" in run.stderr, run.stderr


def test_allreduce_is_hierarchical_when_ranks_share_functions(lambda_run, moto):
    """N=4, K=2: the right sums everywhere, and ranks 1 and 3 (not their function's leader) linked to their
    leader only: the bytes between functions went leader to leader (allreduce_hierarchical.py)."""
    run = lambda_run(4, PROGRAMS / "hier_allreduce.py", extra=("--ranks-per-function", "2"), timeout=SLOW_FIRST)
    assert run.returncode == 0, run.stderr
    lines = {line["rank"]: line for line in map(json.loads, run.lines())}
    assert all(lines[r]["right"] for r in range(4)), lines
    assert lines[1]["peers"] == [0] and lines[3]["peers"] == [2], lines
    assert lines[0]["peers"] == [1, 2] and lines[2]["peers"] == [0, 3], lines
