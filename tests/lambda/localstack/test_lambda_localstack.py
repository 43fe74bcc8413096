"""``fmpirun --backend localstack`` end to end: the same jobs as on moto, against LocalStack.

LocalStack keeps execution environments warm, so later jobs reuse the
processes of earlier ones: this also checks, for real, that nothing of one
job leaks into the next.
"""

from __future__ import annotations

import json
import re
import time

import boto3
import pytest
from lambda_testing import PROGRAMS, REPO


@pytest.mark.parametrize("n", [4, 8])
def test_ring_and_collectives(ls_run, n):
    run = ls_run(n, PROGRAMS / "ring_collectives.py", "ls")
    assert run.returncode == 0, run.stderr
    lines = sorted(run.stdout.splitlines())
    assert len(lines) == n, run.stdout
    assert f"rank 0/{n} token={sum(range(n))} bcast=['ls'] max={n - 1} sum={n * (n + 1) // 2}" in lines


def test_pi_app_template_with_the_endpoint_from_the_environment(ls_run):
    run = ls_run(4, REPO / "apps" / "pi.py", "--samples", "400000", via_env=True)
    assert run.returncode == 0, run.stderr
    assert re.search(r"pi ~= 3\.1\d+ .* from 400000 samples on 4 ranks", run.stdout), run.stdout


def test_rank_that_raises(ls_run):
    run = ls_run(4, PROGRAMS / "raises.py")
    assert run.returncode != 0
    assert "ValueError: rank two cannot go on" in run.stderr
    assert "job aborted by rank 2: uncaught ValueError on rank 2" in run.stderr


def test_warm_environments_do_not_leak(ls_run):
    for _ in range(2):  # the second job runs in the environments the first one warmed up
        run = ls_run(2, PROGRAMS / "leaky.py", "again")
        assert run.returncode == 0, run.stderr
        assert run.stdout.count("'counter': 1") == 2 and "left over" not in run.stdout, run.stdout


def test_bad_event(ls_run, localstack):
    assert ls_run(1, PROGRAMS / "hello.py").returncode == 0
    lam = boto3.client("lambda", endpoint_url=localstack, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    reply = lam.invoke(FunctionName="fmpi-rank", Payload=json.dumps({"fmpi": 1, "job": "j", "rank": 0}))
    assert reply["FunctionError"] == "Unhandled"
    error = json.loads(reply["Payload"].read())
    assert error["errorType"] == "InvalidRankEvent" and "lacks size, relay, token" in error["errorMessage"]


def test_rank_stopped_by_the_function_timeout(ls_run):
    t0 = time.monotonic()
    run = ls_run(3, PROGRAMS / "sleeper.py", extra=("--timeout", "6", "--fill-timeout", "5"))
    assert run.returncode != 0
    assert re.search(r"rank \d reached the function timeout \(6 s\)", run.stderr), run.stderr
    assert time.monotonic() - t0 < 40


def test_retries_are_off(ls_run, localstack):
    assert ls_run(1, PROGRAMS / "hello.py").returncode == 0
    lam = boto3.client("lambda", endpoint_url=localstack, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    assert lam.get_function_event_invoke_config(FunctionName="fmpi-rank")["MaximumRetryAttempts"] == 0
