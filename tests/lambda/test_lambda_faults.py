"""Bad input and platform faults: each ends the job with a message naming the cause and a non-zero status.

Reproduced on moto: no credentials, no or wrong region, a missing role, a
function too large, too little concurrency, a rank that never starts, a rank
stopped by the function timeout, a rank that crashes, and the launcher
dying. After each, every emulated invocation must have ended (the ``moto``
fixture checks): no rank keeps billing while it waits.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid

import pytest
from lambda_testing import FMPIRUN, PROGRAMS, aws_env

from fmpi.launcher.lambda_backend.follow import GRACE

HELLO = PROGRAMS / "hello.py"


def _fresh_name() -> str:
    return "fmpi-test-" + uuid.uuid4().hex[:8]


def test_no_credentials(lambda_run, moto, bundle_cache):
    env = aws_env(moto.endpoint_url, bundle_cache, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None)
    run = lambda_run(2, HELLO, env=env)
    assert run.returncode == 1
    assert "no AWS credentials found" in run.stderr and "aws configure" in run.stderr


def test_rejected_credentials_name_the_cause(lambda_run, moto, bundle_cache, monkeypatch):
    # moto accepts any key, so reject them the way AWS does
    from botocore.exceptions import ClientError

    from fmpi.lambda_runtime.aws_errors import explain

    err = ClientError({"Error": {"Code": "UnrecognizedClientException", "Message": "The security token included in the request is invalid."}}, "GetFunction")
    message = explain(err, "look up function fmpi-rank")
    assert "AWS rejected the credentials" in message and "--profile" in message


def test_no_region(lambda_run, moto, bundle_cache):
    env = aws_env(moto.endpoint_url, bundle_cache, AWS_DEFAULT_REGION=None)
    run = lambda_run(2, HELLO, env=env)
    assert run.returncode == 1
    assert "no AWS region" in run.stderr and "--region" in run.stderr


def test_wrong_region(lambda_run):
    run = lambda_run(2, HELLO, extra=("--region", "mars-north-1"))
    assert run.returncode == 1
    assert "unknown AWS region 'mars-north-1'" in run.stderr


def test_missing_role_for_a_new_function(lambda_run):
    run = lambda_run(2, HELLO, role=False, extra=("--function-name", _fresh_name()))
    assert run.returncode == 1
    assert "does not exist" in run.stderr and "no --role was given" in run.stderr


def test_role_that_lambda_cannot_assume(lambda_run):
    run = lambda_run(2, HELLO, role=False,
                     extra=("--function-name", _fresh_name(), "--role", "arn:aws:iam::123456789012:role/no-such-role"))
    assert run.returncode == 1
    assert "cannot be assumed by Lambda" in run.stderr and "--role" in run.stderr


def test_role_name_that_does_not_exist(lambda_run):
    run = lambda_run(2, HELLO, role=False, extra=("--function-name", _fresh_name(), "--role", "no-such-role"))
    assert run.returncode == 1
    assert "the execution role 'no-such-role' does not exist" in run.stderr


def test_function_too_large(lambda_run, tmp_path):
    code = tmp_path / "big"
    code.mkdir()
    (code / "app.py").write_text("print('never runs')\n")
    with open(code / "weights.bin", "wb") as f:  # sparse: costs no disk and no time
        f.truncate(300 * 1024 * 1024)
    t0 = time.monotonic()
    run = lambda_run(2, code / "app.py")
    assert run.returncode == 1
    assert "the function is too large" in run.stderr and "weights.bin" in run.stderr
    assert time.monotonic() - t0 < 20  # refused before building or uploading anything


def test_concurrency_too_low(lambda_run, moto):
    moto.ctrl.concurrency_limit = 4
    run = lambda_run(8, HELLO)
    assert run.returncode == 1
    assert "8 ranks cannot all run at once" in run.stderr and "is 4" in run.stderr


def test_reserved_concurrency_too_low(lambda_run, moto):
    assert lambda_run(1, HELLO).returncode == 0  # deploy
    lam = moto.client()
    lam.put_function_concurrency(FunctionName="fmpi-rank", ReservedConcurrentExecutions=2)
    try:
        run = lambda_run(3, HELLO)
    finally:
        lam.delete_function_concurrency(FunctionName="fmpi-rank")
    assert run.returncode == 1
    assert "reserved concurrency of 2" in run.stderr


def test_rank_that_never_starts_is_named(lambda_run, moto):
    moto.faults.drop = {2}
    t0 = time.monotonic()
    run = lambda_run(4, PROGRAMS / "ring_collectives.py", extra=("--fill-timeout", "3"))
    assert run.returncode == 1
    assert "3 of 4 ranks joined; missing ranks: 2" in run.stderr
    assert "aws logs tail /aws/lambda/fmpi-rank" in run.stderr
    assert time.monotonic() - t0 < 20


def test_a_fill_timeout_names_the_invocations_that_never_joined(lambda_run, moto):
    # The user is told which invocation to look for: its request id (what Invoke answered, and what its log lines
    # carry) and, had it started, its log stream; the ranks that joined are not named.
    moto.faults.drop = {2}
    before = len(moto.ctrl.history)
    run = lambda_run(3, PROGRAMS / "ring_collectives.py", extra=("--fill-timeout", "15"))  # (room for cold starts)
    assert run.returncode == 1
    assert moto.ctrl.wait_idle(30)
    dropped = [r for r in moto.ctrl.history[before:] if r["error"] == "Emulator.Dropped"]
    assert len(dropped) == 1, moto.ctrl.history[before:]
    request_id = dropped[0]["request_id"]
    assert "2 of 3 ranks joined; missing ranks: 2" in run.stderr, run.stderr
    assert f"Invocations that never joined: rank 2: request id {request_id}, no START line in the log yet" in run.stderr
    assert "rank 0: request id" not in run.stderr and "rank 1: request id" not in run.stderr


def test_rank_stopped_by_the_function_timeout(lambda_run):
    t0 = time.monotonic()
    run = lambda_run(3, PROGRAMS / "sleeper.py", extra=("--timeout", "5", "--fill-timeout", "4"))
    assert run.returncode != 0
    # Every rank is blocked (rank 1 sleeps, the others wait for it): the first watchdog to fire aborts the job.
    assert re.search(r"job aborted by rank \d: rank \d reached the function timeout \(5 s\)", run.stderr), run.stderr
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize(
    "relay, words",
    [
        # fmpirun's relay sees the killed rank's connection close: the rank is lost at the timeout.
        ("fmpi-relay", "rank 1 was stopped by the function timeout (4 s, set with --timeout"),
        # Over Redis nothing connects the launcher to a rank: it gives the rank up after timeout + GRACE.
        ("redis", "rank 1 did not finish within the function timeout (4 s): the platform stopped it"),
    ],
    ids=["fmpi-relay", "redis"],
)
def test_rank_the_platform_kills_when_its_watchdog_cannot_act(lambda_run, moto, request, relay, words):
    # Rank 1 holds the GIL past the function timeout, so its watchdog thread never runs: the only report
    # is the platform's kill (the emulator SIGKILLs the process group at the deadline, as Lambda does).
    extra = ("--timeout", "4", "--fill-timeout", "3")
    redis = None
    if relay == "redis":  # only this case starts a redis-server
        url, redis = request.getfixturevalue("redis_server")
        extra += ("--relay", url)
    before = len(moto.ctrl.history)
    t0 = time.monotonic()
    run = lambda_run(2, PROGRAMS / "gil_hog.py", extra=extra)
    assert run.returncode != 0
    assert words in run.stderr, run.stderr
    assert "reached the function timeout" not in run.stderr  # the watchdog's message: it did not fire
    assert time.monotonic() - t0 < 4 + GRACE + 15  # it ends soon after the platform's kill, never waits forever
    assert moto.ctrl.wait_idle(30)
    ended = {_rank_of(r["logs"]): r["error"] for r in moto.ctrl.history[before:] if r["type"] == "Event"}
    assert ended == {0: None, 1: "Sandbox.Timedout"}, ended  # rank 1 ran until the platform stopped it
    if redis is not None:
        assert not list(redis.scan_iter(match="fmpi:*")), "the job left keys in Redis"


def _timed_lines(stream, out: list[tuple[float, str]]) -> None:
    for line in stream:
        out.append((time.monotonic(), line))


def test_a_rank_silent_past_the_heartbeat_timeout_is_named_as_unresponsive(moto, bundle_cache):
    # The same GIL-holding rank, but with time left before the function timeout: the relay drops it for
    # silence (FMPI_HEARTBEAT_TIMEOUT, 4 s) and fmpirun says so, rather than "crashed" or "timed out".
    # Timed from the moment rank 1 said it started (packaging, deploy and cold starts are not the point,
    # and take long on a loaded machine), against a function timeout far beyond the heartbeat's.
    import threading

    argv = [FMPIRUN, "--backend", "lambda", "-n", "2", "--relay-listen", "127.0.0.1:0", "--role", moto.role_arn,
            "--timeout", "25", "--fill-timeout", "15", "python", str(PROGRAMS / "gil_hog.py")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=aws_env(moto.endpoint_url, bundle_cache))
    out: list[tuple[float, str]] = []
    err: list[tuple[float, str]] = []
    readers = [threading.Thread(target=_timed_lines, args=(proc.stdout, out)),
               threading.Thread(target=_timed_lines, args=(proc.stderr, err))]
    for reader in readers:
        reader.start()
    assert proc.wait(timeout=180) != 0
    for reader in readers:
        reader.join()
    stderr = "".join(line for _, line in err)
    started = next(t for t, line in out if line.startswith("rank 1 started"))
    named = next((t for t, line in err if "rank 1 stopped responding (no heartbeat for " in line), None)
    assert named is not None, stderr
    assert "crashed" not in stderr and "function timeout (25 s" not in stderr, stderr
    assert named - started < 15, stderr  # named at the heartbeat timeout (4 s + checks), well before the 25 s one
    assert moto.ctrl.wait_idle(60)


def test_rank_that_crashes(lambda_run):
    run = lambda_run(3, PROGRAMS / "crash.py")
    assert run.returncode == 1
    assert "rank 1 ended without finalizing" in run.stderr


def test_launcher_killed_ends_every_rank(moto, bundle_cache):
    argv = [FMPIRUN, "--backend", "lambda", "-n", "3", "--relay-listen", "127.0.0.1:0", "--role", moto.role_arn,
            "--timeout", "60", "--fill-timeout", "30", "-v", "python", str(PROGRAMS / "sleeper.py")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=aws_env(moto.endpoint_url, bundle_cache), start_new_session=True)
    try:
        for line in proc.stdout:
            if "linked 3/3" in line:
                break
        else:
            pytest.fail("the job never linked")
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    t0 = time.monotonic()
    # fmpirun's relay died with it: the ranks must notice and end, not wait until their timeout.
    assert moto.ctrl.wait_idle(20), "ranks kept running after the launcher died"
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize(
    "extra, words",
    [
        (("--relay-listen", None), "need a relay the functions can reach"),
        (("--relay-listen", "0.0.0.0:7000"), "not a wildcard address"),
        (("--fill-timeout", "70", "--timeout", "60"), "must be shorter than the function --timeout"),
        (("--timeout", "901"), "--timeout must be 1 to 900"),
        (("--memory", "64"), "--memory must be 128 to 10240"),
        (("--print-join",), "local backend only"),
    ],
)
def test_bad_options(moto, bundle_cache, extra, words):
    argv = [FMPIRUN, "--backend", "lambda", "-n", "2", "--role", moto.role_arn]
    if extra[0] == "--relay-listen" and extra[1] is None:
        extra = ()
    elif "--relay-listen" not in extra:
        argv += ["--relay-listen", "127.0.0.1:0"]
    proc = subprocess.run([*argv, *extra, "python", str(HELLO)], capture_output=True, text=True,
                          env=aws_env(moto.endpoint_url, bundle_cache), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr


def test_not_a_python_program(moto, bundle_cache):
    proc = subprocess.run([FMPIRUN, "--backend", "lambda", "-n", "2", "--relay-listen", "127.0.0.1:0", "hostname"],
                          capture_output=True, text=True, env=aws_env(moto.endpoint_url, bundle_cache), timeout=60)
    assert proc.returncode == 2
    assert "run Python programs" in proc.stderr


def test_missing_dependencies_are_caught_at_deployment(lambda_run):
    run = lambda_run(2, HELLO, extra=("--function-name", _fresh_name(), "--no-bundle-deps"))
    assert run.returncode == 1
    assert "cannot import numpy" in run.stderr and "a layer must provide numpy" in run.stderr, run.stderr


def _rank_of(logs: str) -> int | None:
    """The rank an invocation served, read off its rank logger's JSON lines in the function's log."""
    for line in logs.splitlines():
        if line.startswith("{") and '"fmpi-rank"' in line:
            return json.loads(line).get("rank")
    return None
