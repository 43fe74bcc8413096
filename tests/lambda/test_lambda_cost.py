"""What a Lambda job cost (issue 27 item 5): the cost line, ``--report FILE.json`` and ``--prices``, on emulated Lambda.

The emulator writes a REPORT line at the end of every invocation, as Lambda
does; the billed durations in the report must be those lines' numbers (read
back here from the emulated CloudWatch Logs), not fmpirun's own clock.
"""

from __future__ import annotations

import base64
import json

import pytest
from lambda_testing import PROGRAMS, aws_env

from fmpi.launcher.lambda_backend.billing import parse_report, report_from_tail
from fmpi.launcher.lambda_backend.prices import load

BUCKET = "fmpi-cost-test"
X86_GB_S = 0.0000166667


def test_report_lines_are_parsed_in_text_and_json_formats():
    text = ("REPORT RequestId: 4b1a-77\tDuration: 812.41 ms\tBilled Duration: 1013 ms\tMemory Size: 1769 MB\t"
            "Max Memory Used: 97 MB\tInit Duration: 200.12 ms\t")
    report = parse_report(text)
    assert (report.request_id, report.billed_ms, report.memory_mb, report.max_memory_used_mb) == ("4b1a-77", 1013, 1769, 97)
    assert report.gb_seconds() == pytest.approx(1.013 * 1769 / 1024)
    record = {"type": "platform.report", "record": {"requestId": "r-2", "metrics": {
        "durationMs": 5.0, "billedDurationMs": 6, "memorySizeMB": 128, "maxMemoryUsedMB": 40}}}
    assert parse_report(json.dumps(record)).billed_ms == 6
    assert parse_report("END RequestId: 4b1a-77") is None and parse_report('{"type": "platform.start"}') is None
    assert parse_report("REPORT RequestId: x\tDuration: 1 ms") is None  # no billed duration: not a bill
    tail = base64.b64encode(f"START RequestId: 4b1a-77\n{text}\n".encode()).decode()
    assert report_from_tail(tail) == report and report_from_tail(None) is None


def test_prices_are_dated_overridable_and_checked(tmp_path):
    table = load("us-east-1")
    assert table.as_of and table.per_unit["lambda_gb_second_x86_64"] == X86_GB_S
    elsewhere = load("ap-south-2")
    assert elsewhere.region == "us-east-1" and "none for ap-south-2" in elsewhere.describe()
    own = tmp_path / "prices.json"
    own.write_text(json.dumps({"as_of": "2030-01-01", "regions": {"ap-south-2": {"lambda_request": 1.0}}}))
    mine = load("ap-south-2", str(own))
    assert mine.region == "ap-south-2" and mine.as_of == "2030-01-01" and mine.per_unit["lambda_request"] == 1.0
    assert mine.per_unit["lambda_gb_second_arm64"] == table.per_unit["lambda_gb_second_arm64"]  # the rest: the table's
    for bad, says in (({"regions": {"x": {"lambda_requests": 1}}}, "unknown price 'lambda_requests'"),
                      ({"regions": {"x": {"lambda_request": -1}}}, "must be a number of dollars"),
                      ({"prices": {}}, 'needs {"regions"')):
        own.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=says):
            load("x", str(own))


def _report_lines(moto, function: str) -> dict[str, float]:
    logs = moto.client("logs")
    found = {}
    for page in logs.get_paginator("filter_log_events").paginate(logGroupName=f"/aws/lambda/{function}"):
        for event in page["events"]:
            report = parse_report(event["message"])
            if report is not None:
                found[report.request_id] = report.billed_ms
    return found


def test_cost_report_counts_billed_seconds_requests_relay_and_checkpoints(lambda_run, moto, bundle_cache, tmp_path):
    moto.client("s3").create_bucket(Bucket=BUCKET)
    out = tmp_path / "cost.json"
    env = aws_env(moto.endpoint_url, bundle_cache, FMPI_CHECKPOINT_URL=f"s3://{BUCKET}/cost", FMPI_CHECKPOINT_EVERY="0")
    run = lambda_run(2, PROGRAMS / "cost_job.py", extra=("--channel", "relay", "--report", str(out)), env=env)
    assert run.returncode == 0, run.stderr
    assert sorted(run.lines()) == [f"rank {r} sum {sum(range(1 << 17))}" for r in range(2)]
    report = json.loads(out.read_text())
    totals, launch = report["totals"], report["launches"][0]
    # Every invocation (the ping and both ranks) billed from its REPORT line, with the line's own numbers.
    assert totals["invocations"] == totals["from_report_lines"] == 3, launch["invocations"]
    lines = _report_lines(moto, launch["function"])
    for inv in launch["invocations"]:
        assert inv["source"] == "report" and inv["billed_ms"] == lines[inv["request_id"]], inv
        assert inv["gb_seconds"] == pytest.approx(inv["billed_ms"] / 1000 * inv["memory_mb"] / 1024, abs=1e-6)
    assert totals["gb_seconds"] == pytest.approx(sum(i["gb_seconds"] for i in launch["invocations"]), abs=1e-5)
    assert totals["requests"] == 3
    # The 1 MiB bcast went through the relay: rank 0 sent it there and rank 1 received it.
    assert totals["relay_bytes"] >= 2 * 8 * (1 << 17)
    s3 = totals["checkpoint_requests"]["s3"]
    assert s3["PUT"] >= 2 * 2 + 2, s3  # two saves: each rank's part, and rank 0's manifest
    dollars = report["dollars"]
    assert dollars["compute"] == pytest.approx(totals["gb_seconds"] * X86_GB_S, rel=1e-4)
    assert dollars["checkpoints"] > 0 and dollars["relay"] > 0
    assert dollars["total"] == pytest.approx(sum(v for k, v in dollars.items() if k != "total"), abs=1e-7)
    ranks = {r["rank"]: r for r in launch["ranks"]}
    assert ranks[0]["links"] == {"1": "relayed"} and ranks[1]["links"] == {"0": "relayed"}
    assert all(r["exit_status"] == 0 and r["timings"]["run"] > 0 for r in ranks.values())
    assert ranks[0]["bytes"]["relay_sent"] >= 8 * (1 << 17)
    assert "cost: 2 ranks, " in run.stderr and "GB-s billed (Lambda's REPORT lines for 3 of 3 invocations)" in run.stderr
    assert f"about ${dollars['total']:.5f}" in run.stderr


def test_prices_file_changes_the_dollars_and_a_bad_one_stops_before_deploying(lambda_run, moto, tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"as_of": "2031-02-03", "regions": {"us-east-1": {"lambda_gb_second_x86_64": 1.0}}}))
    out = tmp_path / "cost.json"
    run = lambda_run(2, PROGRAMS / "hello.py", extra=("--report", str(out), "--prices", str(prices)))
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    assert report["dollars"]["compute"] == pytest.approx(report["totals"]["gb_seconds"], rel=1e-6)
    assert report["prices"]["as_of"] == "2031-02-03" and "us-east-1 prices of 2031-02-03" in run.stderr
    prices.write_text("{not json")
    bad = lambda_run(2, PROGRAMS / "hello.py", extra=("--prices", str(prices)))
    assert bad.returncode == 2 and "is not JSON" in bad.stderr and "package" not in bad.stderr, bad.stderr
    nowhere = lambda_run(2, PROGRAMS / "hello.py", extra=("--report", str(tmp_path / "no" / "such" / "r.json")))
    assert nowhere.returncode == 2 and "does not exist" in nowhere.stderr, nowhere.stderr


def test_launches_of_a_relaunched_job_add_up():
    from fmpi.launcher.lambda_backend.billing import Report
    from fmpi.launcher.lambda_backend.cost_report import LaunchFacts, cost_line, job_report, launch_record

    prices = load("us-east-1")

    def launch(job: str, billed_ms: float) -> dict:
        facts = LaunchFacts(job=job, size=2, exit_status=75, function="f", memory_mb=1024, architecture="arm64",
                            seconds=9.0, invoked=2,
                            invocations={r: {"request_id": f"{job}-{r}", "bytes": {"relay_sent": 100, "relay_received": 50},
                                             "requests": {"s3": {"PUT": 2}}} for r in range(2)},
                            reports={f"{job}-{r}": Report(f"{job}-{r}", billed_ms, 1024) for r in range(2)})
        return launch_record(facts, prices)

    report = job_report([launch("a", 1000), launch("b", 3000)], prices)
    totals = report["totals"]
    assert totals["gb_seconds"] == pytest.approx(2 * 1.0 + 2 * 3.0)  # 1 GB x billed seconds, two ranks per launch
    assert totals["requests"] == 4 and totals["relay_bytes"] == 600 and totals["checkpoint_requests"] == {"s3": {"PUT": 8}}
    assert report["dollars"]["compute"] == pytest.approx(8.0 * prices.per_unit["lambda_gb_second_arm64"], rel=1e-4)
    assert "cost: 2 ranks over 2 launches, 8.0 GB-s billed (Lambda's REPORT lines for 4 of 4 invocations)" in cost_line(report, prices)


def test_ranks_of_one_function_are_billed_once():
    """--ranks-per-function 2: four ranks told of two request ids, two invocations billed (not four)."""
    from fmpi.launcher.lambda_backend import cost_report
    from fmpi.launcher.lambda_backend.billing import Report

    prices = load("us-east-1")
    facts = cost_report.LaunchFacts(job="j", size=4, exit_status=0, function="f", memory_mb=2048, architecture="arm64",
                        seconds=9.0, invoked=2, invocations={r: {"request_id": f"req-{r // 2}"} for r in range(4)},
                        reports={f"req-{i}": Report(f"req-{i}", 1000, 2048) for i in range(2)})
    totals = cost_report.job_report([cost_report.launch_record(facts, prices)], prices)["totals"]
    assert totals["invocations"] == totals["from_report_lines"] == 2, totals
    assert totals["gb_seconds"] == pytest.approx(2 * 2.0) and totals["requests"] == 2
