"""Stragglers and failed starts (issue 27 item 3): ``fmpirun --spare K`` on emulated Lambda.

The emulator drops or delays chosen invocations (``Faults``: spares are the
events of rank -1). The first N invocations to join form the world; a spare
that comes after it is complete exits at once, and the cost report names it
with its billed time.
"""

from __future__ import annotations

import json
import time

from lambda_testing import PROGRAMS

HELLO = PROGRAMS / "hello.py"


def _greetings(n: int) -> list[str]:
    return [f"hello from rank {r} of {n}" for r in range(n)]


def test_a_rank_that_never_starts_is_replaced_by_a_spare(lambda_run, moto, tmp_path):
    moto.faults.drop = {1}  # rank 1's own invocation is accepted but never runs
    moto.faults.delay = {-1: 5.0}  # the spares start after ranks 0 and 2 have joined
    out = tmp_path / "cost.json"
    run = lambda_run(3, HELLO, extra=("--spare", "2", "--report", str(out)))
    assert run.returncode == 0, run.stderr
    assert sorted(run.lines()) == _greetings(3)
    launch = json.loads(out.read_text())["launches"][0]
    # One spare took slot 1; the other found the world complete, exited at once, and its bill is Lambda's.
    assert launch["totals"]["spares_not_needed"] == 1, launch["invocations"]
    spare = next(i for i in launch["invocations"] if i["what"] == "spare, not needed")
    assert spare["source"] == "report" and 0 < spare["billed_ms"] < 15_000, spare
    assert launch["totals"]["requests"] == 1 + 3 + 2  # the ping, the ranks, the spares


def test_a_straggler_does_not_hold_the_world(lambda_run, moto):
    moto.faults.delay = {2: 20.0}  # rank 2's invocation starts 20 s late (a slow placement, a cold start)
    before = len(moto.ctrl.history)
    run = lambda_run(3, HELLO, extra=("--spare", "1"))
    ended = time.time()
    assert run.returncode == 0, run.stderr
    assert sorted(run.lines()) == _greetings(3)
    assert moto.ctrl.wait_idle(60)
    late = [r for r in moto.ctrl.history[before:] if r["type"] == "Event" and r["spawn"] - r["t_api"] >= 19]
    assert len(late) == 1 and late[0]["spawn"] > ended, "the world formed with the spare, not with the straggler"


def test_spares_count_against_the_concurrency_quota(lambda_run, moto):
    moto.ctrl.concurrency_limit = 4
    run = lambda_run(3, HELLO, extra=("--spare", "2"))
    assert run.returncode == 1 and "5 ranks cannot all run at once" in run.stderr, run.stderr


def test_bad_spare_counts_are_refused(lambda_run, moto):
    run = lambda_run(2, HELLO, extra=("--spare", "-1"))
    assert run.returncode == 2 and "--spare must be 0 or more" in run.stderr, run.stderr
