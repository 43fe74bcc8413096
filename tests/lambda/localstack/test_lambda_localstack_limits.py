"""Past the platform's limits (issue 27) on LocalStack: the same end-to-end checks as on moto.

A k-means longer than four function timeouts relaunched from checkpoints in LocalStack's S3, several
ranks per invocation with the hierarchical collectives, spares, the concurrency checks against
LocalStack's Lambda API, and the cost report from the invocations LocalStack ran.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import boto3
import pytest
from lambda_testing import FMPIRUN, PROGRAMS, kmeans_lasting

FUNCTION_TIMEOUT = 10


def _client(localstack: str, service: str):
    return boto3.client(service, endpoint_url=localstack, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


@pytest.mark.timeout(1500)
def test_a_40_second_kmeans_under_a_10_second_function_timeout_is_bit_identical(ls_run, localstack):
    argv = kmeans_lasting(40)
    t0 = time.monotonic()
    whole = subprocess.run([FMPIRUN, "-n", "4", "python", *argv], capture_output=True, text=True, timeout=600)
    uninterrupted = time.monotonic() - t0
    assert whole.returncode == 0, whole.stderr
    s3 = _client(localstack, "s3")
    bucket = "fmpi-code-000000000000-us-east-1"  # LocalStack's account
    before = _keys(s3, bucket, "checkpoints/")
    run = ls_run(4, *argv, extra=("--timeout", str(FUNCTION_TIMEOUT), "--fill-timeout", "8", "--max-runtime", "1200"),
                 env={"FMPI_CHECKPOINT_EVERY": "4", "FMPI_CHECKPOINT_MARGIN": "2"}, timeout=1300)
    assert run.returncode == 0, run.stderr
    launches = int(re.search(r"the job ended after (\d+) launches", run.stderr).group(1))
    # (sized to about 40 s uninterrupted on this machine; what the test needs is several launches)
    assert launches >= 3, f"{launches} launches for a job of {uninterrupted:.0f} s uninterrupted\n{run.stderr}"
    result = next(line for line in run.stdout.splitlines() if line.startswith("kmeans "))
    assert result == next(line for line in whole.stdout.splitlines() if line.startswith("kmeans "))
    assert "stopped at the checkpoint of step" in run.stderr, run.stderr
    assert _keys(s3, bucket, "checkpoints/") <= before, "a checkpoint fmpirun chose itself is removed when the job ends well"


def _keys(s3, bucket: str, prefix: str) -> set[str]:
    """The keys under `prefix` (LocalStack keeps S3 across its runs in one folder of this machine)."""
    try:
        return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])}
    except s3.exceptions.NoSuchBucket:
        return set()


def test_ranks_per_function_share_invocations_and_reduce_inside_them(ls_run, tmp_path):
    cost = tmp_path / "cost.json"
    run = ls_run(4, PROGRAMS / "per_function.py", extra=("--ranks-per-function", "2", "--report", str(cost)))
    assert run.returncode == 0, run.stderr
    lines = {line["rank"]: line for line in map(json.loads, run.lines())}
    assert len({line["pid"] for line in lines.values()}) == 4
    for group in ([0, 1], [2, 3]):
        for rank in group:
            assert lines[rank]["members"] == group and lines[rank]["world_sum"] == 6, lines[rank]
    totals = json.loads(cost.read_text())["totals"]
    assert totals["requests"] == 1 + 2, totals  # the ping and one invocation per function

    hier = ls_run(4, PROGRAMS / "hier_allreduce.py", extra=("--ranks-per-function", "2"))
    assert hier.returncode == 0, hier.stderr
    lines = {line["rank"]: line for line in map(json.loads, hier.lines())}
    assert all(line["right"] for line in lines.values()), lines
    assert lines[1]["peers"] == [0] and lines[3]["peers"] == [2], lines  # members talked to their head only


def test_a_spare_that_is_not_needed_exits_and_is_billed(ls_run, tmp_path):
    out = tmp_path / "cost.json"
    run = ls_run(3, PROGRAMS / "hello.py", extra=("--spare", "1", "--report", str(out)))
    assert run.returncode == 0, run.stderr
    assert sorted(run.lines()) == [f"hello from rank {r} of 3" for r in range(3)]
    launch = json.loads(out.read_text())["launches"][0]
    # The ping, three ranks and the spare were invoked and billed. (Which one was not needed, moto's test
    # checks: the log line that says so does not reach LocalStack's CloudWatch through the test executor.)
    assert launch["totals"]["requests"] == 1 + 3 + 1, launch["totals"]
    assert len(launch["invocations"]) == 5, launch["invocations"]


def test_a_job_larger_than_the_reserved_concurrency_is_refused_before_it_starts(ls_run, localstack):
    assert ls_run(1, PROGRAMS / "hello.py").returncode == 0  # deployed
    lam = _client(localstack, "lambda")
    lam.put_function_concurrency(FunctionName="fmpi-rank", ReservedConcurrentExecutions=2)
    try:
        run = ls_run(3, PROGRAMS / "hello.py")
    finally:
        lam.delete_function_concurrency(FunctionName="fmpi-rank")
    assert run.returncode == 1, run.stderr
    assert "reserved concurrency of 2" in run.stderr, run.stderr
    assert "hello from" not in run.stdout


def test_the_cost_report_bills_every_invocation(ls_run, tmp_path):
    out = tmp_path / "cost.json"
    run = ls_run(2, PROGRAMS / "hello.py", extra=("--report", str(out)))
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    totals, launch = report["totals"], report["launches"][0]
    assert totals["invocations"] == totals["requests"] == 3, launch["invocations"]  # the ping and both ranks
    for inv in launch["invocations"]:
        assert inv["billed_ms"] > 0 and inv["memory_mb"] > 0, inv
        assert inv["gb_seconds"] == pytest.approx(inv["billed_ms"] / 1000 * inv["memory_mb"] / 1024, abs=1e-6)
    assert report["dollars"]["total"] > 0
    assert sorted(r["rank"] for r in launch["ranks"]) == [0, 1]
    assert "cost: 2 ranks, " in run.stderr, run.stderr
