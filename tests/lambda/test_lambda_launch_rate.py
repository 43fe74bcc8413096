"""Launching many ranks (issue 27 item 4): the fan-out keeps to Lambda's scaling rule, and throttled invocations
are retried with back-off up to a bound, on emulated Lambda whose Invoke API answers 429 where a test says.

(The concurrency quota check is in test_lambda_faults.py: test_concurrency_too_low, test_reserved_concurrency_too_low.)
"""

from __future__ import annotations

import time

from lambda_testing import PROGRAMS, aws_env

from fmpi.lambda_runtime.throttling import ATTEMPTS

HELLO = PROGRAMS / "hello.py"


def _greetings(n: int) -> list[str]:
    return [f"hello from rank {r} of {n}" for r in range(n)]


def test_throttled_invocations_are_retried_with_backoff(lambda_run, moto):
    # Ten refusals in a row for rank 1: more than botocore's own retries (9 calls in all) would have absorbed.
    moto.faults.throttle = {1: 10, 2: 2}
    run = lambda_run(3, HELLO)
    assert run.returncode == 0, run.stderr
    assert sorted(run.lines()) == _greetings(3)
    assert moto.faults.throttled.count(1) == 10 and moto.faults.throttled.count(2) == 2
    assert "Lambda throttled the invocation of rank" in run.stderr
    assert "12 throttled invocations of 2 ranks retried" in run.stderr, run.stderr


def test_an_invocation_throttled_past_the_bound_ends_the_job_with_one_line(lambda_run, moto):
    moto.faults.throttle = {1: 1000}
    t0 = time.monotonic()
    run = lambda_run(3, HELLO)
    assert run.returncode == 1, run.stderr
    assert "cannot invoke rank 1: throttled by Lambda" in run.stderr, run.stderr
    assert moto.faults.throttled.count(1) == ATTEMPTS  # bounded: the back-off gave up, nothing more was sent
    assert time.monotonic() - t0 < 90


def test_the_fanout_keeps_to_the_scaling_rule(lambda_run, moto, bundle_cache):
    before = len(moto.ctrl.history)
    env = aws_env(moto.endpoint_url, bundle_cache, FMPI_LAMBDA_SCALING="2/1.5")
    run = lambda_run(5, HELLO, env=env)
    assert run.returncode == 0, run.stderr
    assert sorted(run.lines()) == _greetings(5)
    calls = sorted(rec["t_api"] for rec in moto.ctrl.history[before:] if rec["type"] == "Event")
    assert len(calls) == 5
    # Waves of 2 every 1.5 s: invocations 0-1 at once, 2-3 after 1.5 s, 4 after 3 s.
    assert calls[1] - calls[0] < 1.4 and calls[2] - calls[0] >= 1.4 and calls[4] - calls[0] >= 2.9, calls
    assert "Lambda scales a function by 2 executions every 1.5 s: waiting" in run.stderr


def test_a_bad_scaling_rule_is_refused_before_anything_is_deployed(lambda_run, moto, bundle_cache):
    run = lambda_run(2, HELLO, env=aws_env(moto.endpoint_url, bundle_cache, FMPI_LAMBDA_SCALING="fast"))
    # (status 1, not 2: transport/carriers.py reads the settings when fmpirun imports it, before its own check)
    assert run.returncode in (1, 2) and "FMPI_LAMBDA_SCALING must be STEP/SECONDS" in run.stderr, run.stderr
    assert run.stderr.count("\n") == 1 and "package" not in run.stderr
