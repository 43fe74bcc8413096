"""``fmpirun --backend lambda`` end to end against moto, every rank a real awslambdaric process.

fmpirun runs as a subprocess configured only by its command line and
``AWS_ENDPOINT_URL`` (pointing at the in-process moto server), exactly as a
user would run it against AWS.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from lambda_testing import FMPIRUN, PROGRAMS, REPO, aws_env


@pytest.mark.parametrize("n", [4, 8])
def test_ring_and_collectives(lambda_run, moto, n):
    run = lambda_run(n, PROGRAMS / "ring_collectives.py", "alpha", "beta")
    assert run.returncode == 0, run.stderr
    lines = sorted(run.lines())
    assert len(lines) == n, run.stdout
    token = sum(range(n))
    assert f"rank 0/{n} token={token} bcast=['alpha', 'beta'] max={n - 1} sum={n * (n + 1) // 2}" in lines
    for r in range(1, n):
        assert f"rank {r}/{n} token=- bcast=['alpha', 'beta'] max={n - 1} sum=None" in lines


def test_pi_app_template(lambda_run):
    run = lambda_run(4, REPO / "apps" / "pi.py", "--samples", "400000")
    assert run.returncode == 0, run.stderr
    m = re.search(r"pi ~= (\d\.\d+) .* from 400000 samples on 4 ranks", run.stdout)
    assert m and abs(float(m.group(1)) - 3.14159) < 0.02, run.stdout


def test_rank_that_raises_fails_the_job_and_names_its_rank(lambda_run, moto):
    t0 = time.monotonic()
    run = lambda_run(4, PROGRAMS / "raises.py")
    assert run.returncode != 0
    assert "ValueError: rank two cannot go on" in run.stderr  # the traceback, forwarded from the function
    assert 'raises.py", line' in run.stderr and "runpy" not in run.stderr
    assert "job aborted by rank 2: uncaught ValueError on rank 2: rank two cannot go on" in run.stderr
    assert "unreachable" not in run.stdout
    assert time.monotonic() - t0 < 30  # the others were aborted, not left to time out


def test_exit_status_of_a_rank_is_the_jobs(lambda_run):
    run = lambda_run(3, PROGRAMS / "exit_code.py")
    assert run.returncode == 4, run.stderr
    assert "rank 1 exited with status 4" in run.stderr


def test_output_is_streamed_while_the_rank_runs(moto, bundle_cache):
    argv = [FMPIRUN, "--backend", "lambda", "-n", "2", "--relay-listen", "127.0.0.1:0", "--role", moto.role_arn,
            "--timeout", "60", "--fill-timeout", "30", "--tag-output", "python", str(PROGRAMS / "streaming.py")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=aws_env(moto.endpoint_url, bundle_cache))
    seen = {}
    try:
        for line in proc.stdout:
            seen.setdefault(line.strip(), time.monotonic())
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    first = seen["[0] first line"]
    second = seen["[0] second line"]
    assert second - first > 1.0, "the first line arrived only when the rank ended"
    assert "[1] partial line without newline" in seen  # flushed partial lines arrive too


def test_tree_fanout_starts_every_rank(lambda_run, moto):
    before = len(moto.ctrl.history)
    run = lambda_run(8, PROGRAMS / "ring_collectives.py", extra=("--fanout-arity", "2"))
    assert run.returncode == 0, run.stderr
    assert len(run.lines()) == 8
    assert moto.ctrl.wait_idle(30)  # the handlers' return values are recorded when their invocations end
    summaries = [json.loads(r["payload"]) for r in moto.ctrl.history[before:] if r["type"] == "Event"]
    by_rank = {s["rank"]: s for s in summaries}
    assert sorted(by_rank) == list(range(8))
    # fmpirun invoked the heads of 2 blocks (ranks 0 and 4); ranks invoked the other 6.
    invoked_by_ranks = sum(s.get("fanout", {}).get("invoked", 0) for s in summaries)
    assert invoked_by_ranks == 6
    assert by_rank[0]["fanout"]["invoked"] == 2 and by_rank[4]["fanout"]["invoked"] == 2


def test_duplicate_invocation_is_refused_at_rendezvous(lambda_run, moto):
    moto.faults.duplicate = {1}  # Lambda delivers rank 1's event twice ("at least once")
    before = len(moto.ctrl.history)
    run = lambda_run(4, PROGRAMS / "ring_collectives.py")
    assert run.returncode == 0, run.stderr
    assert len(run.lines()) == 4
    assert moto.ctrl.wait_idle(30)
    summaries = [json.loads(r["payload"]) for r in moto.ctrl.history[before:] if r["type"] == "Event"]
    rank1 = sorted(s["status"] for s in summaries if s["rank"] == 1)
    assert rank1 == ["duplicate", "finished"], summaries
    refused = next(s for s in summaries if s["status"] == "duplicate")
    assert "already registered" in refused["message"] and "is refused" in refused["message"]


def test_summary_reports_timings_and_bytes(lambda_run, moto):
    before = len(moto.ctrl.history)
    run = lambda_run(2, PROGRAMS / "ring_collectives.py")
    assert run.returncode == 0, run.stderr
    assert moto.ctrl.wait_idle(30)  # the handlers' return values are recorded when their invocations end
    summaries = [json.loads(r["payload"]) for r in moto.ctrl.history[before:] if r["type"] == "Event"]
    assert len(summaries) == 2
    for s in summaries:
        assert s["status"] == "finished" and s["exit_status"] == 0
        assert set(s["timings"]) >= {"join", "run", "total"}
        assert s["bytes"]["sent"] > 0 and s["bytes"]["received"] > 0
    # Each invocation's log (the function's stdout) has the rank logger's JSON lines, every one carrying
    # the job id and the rank that invocation served.
    for record in (r for r in moto.ctrl.history[before:] if r["type"] == "Event"):
        summary = json.loads(record["payload"])
        lines = [json.loads(line) for line in record["logs"].splitlines() if line.startswith('{"level"')]
        lines = [line for line in lines if line.get("service") == "fmpi-rank"]
        assert {"rank invoked", "joined the job", "program finished"} <= {line["message"] for line in lines}, record["logs"]
        assert all((line.get("job"), line.get("rank")) == (summary["job"], summary["rank"]) for line in lines), lines
    # The function as deployed with fmpirun's defaults: one full vCPU of memory, and no async retries
    # (Lambda's default is 2: a retried rank would arrive after its job moved on).
    lam = moto.client()
    assert lam.get_function(FunctionName="fmpi-rank")["Configuration"]["MemorySize"] == 1769
    assert lam.get_function_event_invoke_config(FunctionName="fmpi-rank")["MaximumRetryAttempts"] == 0


def test_bad_event_gets_a_clean_function_error(lambda_run, moto):
    run = lambda_run(1, PROGRAMS / "hello.py")  # makes sure the function is deployed
    assert run.returncode == 0, run.stderr
    lam = moto.client()
    for event, words in [
        ({"hello": "world"}, "not an fmpi rank event"),
        ({"fmpi": 1, "job": "j1", "rank": 0}, "lacks size, relay, token"),
        ({"fmpi": 1, "job": "j1", "rank": 5, "size": 2, "relay": "tcp://h:1", "token": "x" * 20,
          "deadline": 1e12, "program": {"script": "a.py"}}, "rank 5 is outside a world of 2"),
        ({"fmpi": 1, "job": "j1", "rank": 0, "size": 2, "relay": "tcp://h:1", "token": "x" * 20,
          "deadline": 1e12, "program": {"script": "../../etc/passwd"}}, "relative path inside the code directory"),
        ({"fmpi": 1, "job": "j1", "rank": 0, "size": 2, "relay": "tcp://h:1", "token": "x" * 20,
          "deadline": 1e12, "program": {"script": "nowhere.py"}}, "'nowhere.py' is not in the deployed code"),
    ]:
        reply = lam.invoke(FunctionName="fmpi-rank", Payload=json.dumps(event))
        assert reply["FunctionError"] == "Unhandled"
        error = json.loads(reply["Payload"].read())
        assert error["errorType"] == "InvalidRankEvent", error
        assert words in error["errorMessage"], error
        assert len(error.get("stackTrace", [])) <= 1  # raised at the top, not deep inside


def _layer_zip(tmp_path, cache) -> bytes:
    """numpy and powertools as a layer built for the runtime: python/<package>..., as `pip install -t python/` lays them out."""
    import zipfile

    from fmpi.lambda_runtime.runtimes import default_architecture, default_runtime
    from fmpi.launcher.lambda_backend import packaging
    from fmpi.launcher.lambda_backend.target_deps import target_dependencies

    folder, _cached = target_dependencies(packaging.TARGET_REQUIREMENTS, default_runtime(), default_architecture(), cache)
    path = tmp_path / "layer.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for source in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != ".complete"):
            zf.write(source, "python/" + source.relative_to(folder).as_posix())
    return path.read_bytes()


def test_dependencies_from_a_layer(lambda_run, moto, tmp_path, bundle_cache):
    lam = moto.client()
    layer = _layer_zip(tmp_path, bundle_cache / "lambda")
    arn = lam.publish_layer_version(LayerName="fmpi-deps", Content={"ZipFile": layer})["LayerVersionArn"]
    run = lambda_run(4, REPO / "apps" / "pi.py", "--samples", "100000",
                     extra=("--function-name", "fmpi-layered", "--layers", arn, "--no-bundle-deps"))
    assert run.returncode == 0, run.stderr
    assert "from 100000 samples on 4 ranks" in run.stdout
    conf = lam.get_function(FunctionName="fmpi-layered")["Configuration"]
    assert [layer["Arn"] for layer in conf["Layers"]] == [arn]
    # fmpi, the .py files of mpi4py and the program only, compiled (2.0 MiB at d1eb878); numpy alone is 15+ MiB
    assert conf["CodeSize"] < 4 * 2**20
