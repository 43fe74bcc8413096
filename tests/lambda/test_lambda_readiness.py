"""What a first run on a real AWS account needs (issue 24), rehearsed against moto through fmpi-lambda-local's emulator.

fmpirun runs as a subprocess configured only by its command line and the
environment, as a user runs it; the emulated functions know nothing of the
launcher's environment or files (as on AWS). Network namespaces (root) stand
in for a relay the functions cannot reach.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from lambda_testing import FMPIRUN, PROGRAMS, REPO, aws_env
from tests_support import RelayProcess, free_port

HELLO = PROGRAMS / "hello.py"


def _fresh_name() -> str:
    return "fmpi-ready-" + uuid.uuid4().hex[:8]


# ------------------------------------------------------------------ environment


def test_environment_reaches_lambda_ranks(lambda_run, moto, bundle_cache):
    env = aws_env(moto.endpoint_url, bundle_cache, MY_SETTING="from-here", NOT_PASSED="stays-here",
                  FMPI_COLL_ALGO="allreduce:ring")
    run = lambda_run(2, PROGRAMS / "environment.py", extra=("-x", "MY_SETTING", "--env", "GIVEN_HERE=42"), env=env)
    assert run.returncode == 0, run.stderr
    for rank in (0, 1):
        assert (f"rank {rank}: MY_SETTING=from-here GIVEN_HERE=42 FMPI_COLL_ALGO=allreduce:ring NOT_PASSED=None"
                in run.lines()), run.stdout


@pytest.mark.parametrize("extra, words", [
    (("--env", "AWS_SECRET_ACCESS_KEY=x"), "set by Lambda for the function"),
    (("-x", "SURELY_NOT_SET_ANYWHERE"), "is not set here"),
    (("--env", "FMPI_CHANNEL=sideways"), "FMPI_CHANNEL must be one of"),
])
def test_bad_environment_is_refused_before_anything_runs(lambda_run, extra, words):
    run = lambda_run(2, HELLO, extra=extra)
    assert run.returncode == 2 and words in run.stderr, run.stderr


def test_region_from_aws_region_as_the_aws_cli_reads_it(lambda_run, moto, bundle_cache):
    env = aws_env(moto.endpoint_url, bundle_cache, AWS_DEFAULT_REGION=None, AWS_REGION="us-east-1")
    run = lambda_run(1, HELLO, env=env)
    assert run.returncode == 0, run.stderr
    assert "account 123456789012, region us-east-1" in run.stderr and "function fmpi-rank" in run.stderr


# ------------------------------------------------------------------ the relay


def test_a_tls_relay_with_a_private_ca_is_trusted_by_the_ranks(lambda_run, moto, bundle_cache, tmp_path):
    pytest.importorskip("cryptography")
    from tls_support import make_pki

    pki = make_pki(tmp_path)
    relay = RelayProcess("--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]), scheme="tls")
    try:
        env = aws_env(moto.endpoint_url, bundle_cache, FMPI_TLS_CA=str(pki["ca"]))
        run = lambda_run(2, HELLO, extra=("--relay", relay.url, "--fill-timeout", "20"), env=env)
    finally:
        relay.stop()
    assert run.returncode == 0, run.stderr
    assert sorted(run.lines()) == ["hello from rank 0 of 2", "hello from rank 1 of 2"]


def test_relay_listens_on_every_interface_and_is_announced_with_a_fixed_probe_port(lambda_run):
    probe = free_port()
    run = lambda_run(2, HELLO, extra=("--relay-listen", "0.0.0.0:0", "--relay-advertise", "127.0.0.1",
                                      "--relay-probe-port", str(probe), "-v"))
    assert run.returncode == 0, run.stderr
    assert f"NAT probe port {probe}" in run.stderr
    assert "relay reached in" in run.stderr and "cannot reach the relay's NAT probe port" not in run.stderr


@pytest.fixture
def isolated_netns():
    """A network namespace with nothing but its own loopback: no relay of ours is reachable from it."""
    if os.geteuid() != 0 or not Path("/usr/sbin/ip").exists() and not Path("/sbin/ip").exists():
        pytest.skip("needs root and iproute2 (network namespaces)")
    name = f"fmpi-iso-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


@pytest.mark.natlab
def test_a_relay_the_functions_cannot_reach_is_found_by_the_ping(lambda_run, moto, isolated_netns):
    moto.faults.netns = lambda rank: isolated_netns  # the ping and every rank
    before = len(moto.ctrl.history)
    t0 = time.monotonic()
    run = lambda_run(2, HELLO)
    assert run.returncode == 1
    assert "the function cannot reach the relay at tcp://127.0.0.1:" in run.stderr and "No rank was started" in run.stderr
    assert time.monotonic() - t0 < 25  # not the 30 s fill timeout
    assert moto.ctrl.wait_idle(30)
    assert not [r for r in moto.ctrl.history[before:] if r["type"] == "Event"], "ranks were invoked"


@pytest.mark.natlab
def test_a_rank_that_cannot_join_ends_the_job_at_once_with_the_cause(lambda_run, moto, isolated_netns):
    moto.faults.netns = lambda rank: isolated_netns if rank >= 0 else None  # the ping gets through, the ranks not
    t0 = time.monotonic()
    run = lambda_run(2, HELLO)  # --fill-timeout 30
    elapsed = time.monotonic() - t0
    assert run.returncode == 1
    assert "could not join the job: cannot reach the relay at tcp://127.0.0.1:" in run.stderr, run.stderr
    assert "from the function's log /aws/lambda/fmpi-rank" in run.stderr
    assert elapsed < 25, f"{elapsed:.1f} s: fmpirun waited for the fill timeout"


# ------------------------------------------------------------------ deployment


def test_a_job_runs_the_code_it_deployed_while_another_deploys_to_the_same_function(moto, bundle_cache):
    """Job A's rank 1 starts 15 s late (a cold start, throttling); meanwhile job B deploys other code to the
    same function. A's rank must still run A's code (the version A published), not $LATEST."""
    name = _fresh_name()
    env = aws_env(moto.endpoint_url, bundle_cache)
    common = ["--backend", "lambda", "--function-name", name, "--role", moto.role_arn, "--timeout", "90",
              "--relay-listen", "127.0.0.1:0"]
    job_b = [FMPIRUN, *common, "-n", "1", "python", str(PROGRAMS / "version_b" / "job_b.py")]
    subprocess.run([*job_b, "--dry-run"], env=env, capture_output=True, timeout=300, check=True)  # B's zip, cached
    moto.faults.delay = {1: 15.0}
    job_a = subprocess.Popen([FMPIRUN, *common, "-n", "2", "--fill-timeout", "60", "-v", "python",
                              str(PROGRAMS / "version_a" / "job_a.py")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err_a: list[str] = []
    started = threading.Event()

    def read_stderr() -> None:
        for line in job_a.stderr:
            err_a.append(line)
            if "starting 2 ranks" in line:
                started.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert started.wait(180), "".join(err_a)
        t_started = time.monotonic()
        done_b = subprocess.run(job_b, env=env, capture_output=True, text=True, timeout=120)
        b_seconds = time.monotonic() - t_started
        out_a = job_a.stdout.read()
        assert job_a.wait(120) == 0, "".join(err_a)
    finally:
        job_a.kill()
        job_a.wait()
        reader.join(10)
    assert done_b.returncode == 0 and "rank 0 runs B" in done_b.stdout, done_b.stderr
    assert b_seconds < 15, f"job B took {b_seconds:.1f} s: it did not deploy before A's rank 1 started"
    assert sorted(out_a.splitlines()) == ["rank 0 runs A", "rank 1 runs A"], out_a
    lam = moto.client()
    versions = [v["Version"] for v in lam.list_versions_by_function(FunctionName=name)["Versions"]]
    assert {"1", "2"} <= set(versions)  # one per program


def test_a_new_role_is_waited_for_while_iam_propagates_it(lambda_run, moto, bundle_cache):
    dry = [FMPIRUN, "--backend", "lambda", "--dry-run", "-n", "1", "python", str(HELLO)]
    subprocess.run(dry, env=aws_env(None, bundle_cache), capture_output=True, timeout=300, check=True)  # zip cached
    iam = moto.client("iam")
    trust = ('{"Version":"2012-10-17","Statement":[{"Effect":"Allow",'
             '"Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}')
    arn = iam.create_role(RoleName=_fresh_name(), AssumeRolePolicyDocument=trust)["Role"]["Arn"]
    moto.ctrl.role_propagation_s = 12.0  # fmpirun reaches CreateFunction well within that (its package is cached)
    try:
        run = lambda_run(1, HELLO, role=False, extra=("--function-name", _fresh_name(), "--role", arn))
    finally:
        moto.ctrl.role_propagation_s = 0.0
    assert run.returncode == 0, run.stderr
    assert "IAM is still propagating it" in run.stderr, run.stderr


def test_what_fmpirun_creates_is_tagged_kept_short_and_cleaned_up(lambda_run, moto, bundle_cache, tmp_path):
    name = _fresh_name()
    run = lambda_run(1, HELLO, extra=("--function-name", name, "--log-retention", "7"))
    assert run.returncode == 0, run.stderr
    lam, logs = moto.client(), moto.client("logs")
    arn = lam.get_function(FunctionName=name)["Configuration"]["FunctionArn"]
    assert lam.list_tags(Resource=arn)["Tags"].get("fmpi:created-by") == "fmpirun"
    group = logs.describe_log_groups(logGroupNamePrefix=f"/aws/lambda/{name}")["logGroups"][0]
    assert group.get("retentionInDays") == 7
    assert logs.list_tags_log_group(logGroupName=f"/aws/lambda/{name}")["tags"].get("fmpi:created-by") == "fmpirun"
    # A function fmpirun did not create stays, whatever its name.
    other = "fmpi-not-ours-" + uuid.uuid4().hex[:6]
    zipped = (bundle_cache / "lambda").glob("*.zip").__next__().read_bytes()
    lam.create_function(FunctionName=other, Runtime="python3.11", Role=moto.role_arn, Handler="x.y",
                        Code={"ZipFile": zipped})
    cleanup = [FMPIRUN, "--backend", "lambda", "--cleanup"]
    env = aws_env(moto.endpoint_url, bundle_cache)
    dry = subprocess.run([*cleanup, "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and f"would delete the function {name}" in dry.stderr, dry.stderr
    assert other not in dry.stderr
    lam.get_function(FunctionName=name)  # still there after the dry run
    done = subprocess.run(cleanup, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and f"deleted the function {name}" in done.stderr, done.stderr
    assert f"deleted the log group /aws/lambda/{name}" in done.stderr
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function(FunctionName=name)
    assert lam.get_function(FunctionName=other)["Configuration"]["FunctionName"] == other
    lam.delete_function(FunctionName=other)


# ------------------------------------------------------------------ what the user sees


def test_steps_and_cost_are_shown_even_when_the_job_fails(lambda_run):
    run = lambda_run(3, PROGRAMS / "exit_code.py")
    assert run.returncode == 4, run.stderr
    assert "fmpirun: package " in run.stderr and "answers: fmpi" in run.stderr  # plain lines: stderr is no terminal
    assert "fmpirun: cost: 3 ranks, " in run.stderr and " GB-s billed (Lambda's REPORT lines for " in run.stderr
    assert "about $" in run.stderr


def test_progress_is_live_on_a_terminal(moto, bundle_cache):
    import pty

    master, slave = pty.openpty()
    argv = [FMPIRUN, "--backend", "lambda", "-n", "2", "--relay-listen", "127.0.0.1:0", "--role", moto.role_arn,
            "--timeout", "60", "--fill-timeout", "30", "python", str(HELLO)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, env=aws_env(moto.endpoint_url, bundle_cache))
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's last writer closed it
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    out = proc.stdout.read().decode()
    assert proc.wait(60) == 0, seen.decode(errors="replace")
    screen = seen.decode(errors="replace")
    assert "✓" in screen and "package" in screen and "version" in screen, screen
    assert "invoked 2/2" in screen or "joined 2/2" in screen, screen
    assert "cost: 2 ranks" in screen
    assert sorted(out.splitlines()) == ["hello from rank 0 of 2", "hello from rank 1 of 2"]


def test_dry_run_lists_the_package_without_secrets(moto, bundle_cache, tmp_path):
    code = tmp_path / "project"
    (code / ".aws").mkdir(parents=True)
    (code / "data").mkdir()
    (code / "main.py").write_text("print('hi')\n")
    (code / ".env").write_text("TOKEN=secret\n")
    (code / ".aws" / "credentials").write_text("[default]\n")
    (code / "data" / "big.csv").write_text("1,2\n")
    (code / ".fmpiignore").write_text("data/\n")
    proc = subprocess.run([FMPIRUN, "--backend", "lambda", "--dry-run", "-n", "2", "python", str(code / "main.py")],
                          capture_output=True, text=True, timeout=300, env=aws_env(None, bundle_cache))
    assert proc.returncode == 0, proc.stderr
    assert "  main.py  " in proc.stdout and "numpy/" in proc.stdout and "zipped" in proc.stdout
    for secret in (".env", "credentials", "big.csv", ".fmpiignore"):
        assert secret not in proc.stdout.replace("a .fmpiignore", ""), proc.stdout


def test_ctrl_c_while_packaging_ends_without_a_traceback(moto, tmp_path):
    env = aws_env(moto.endpoint_url, tmp_path / "empty-cache")  # nothing cached: pip must build the dependencies
    argv = [FMPIRUN, "--backend", "lambda", "-n", "2", "--relay-listen", "127.0.0.1:0", "--role", moto.role_arn,
            "-v", "python", str(HELLO)]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "region us-east-1" in line:
            break
    time.sleep(1.5)  # into the packaging (the checks before it take well under a second here)
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(60) == 130, "".join(seen) + rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
    assert "interrupted" in rest
    assert not list((tmp_path / "empty-cache").rglob("*.tmp*")), "a half-built file was left in the cache"


@pytest.mark.parametrize("problem", ["concurrency", "role"])
def test_cheap_checks_come_before_packaging(lambda_run, moto, tmp_path, problem):
    cache = tmp_path / "fresh-cache"
    extra: tuple[str, ...] = ()
    if problem == "concurrency":
        moto.ctrl.concurrency_limit = 4
        n, words = 8, "8 ranks cannot all run at once"
    else:
        n, words = 2, "the execution role 'no-such-role' does not exist"
        extra = ("--function-name", _fresh_name(), "--role", "no-such-role")
    run = lambda_run(n, HELLO, extra=extra, env=aws_env(moto.endpoint_url, cache))
    assert run.returncode == 1 and words in run.stderr, run.stderr
    assert not list(cache.rglob("*.zip")) and not (cache / "lambda" / "deps").exists(), "packaged before checking"


def test_emulated_functions_share_no_memory_as_on_lambda(lambda_run):
    from fmpi.lambda_local.sandbox import capabilities

    if not capabilities()["tmp"]:
        pytest.skip("private mounts (/dev/shm, /tmp) need root")
    run = lambda_run(4, REPO / "apps" / "pi.py", "--samples", "100000", extra=("-v",))
    assert run.returncode == 0, run.stderr
    assert "links: 3 (" in run.stderr and "with shared memory" not in run.stderr, run.stderr


def test_the_links_summary_is_printed_only_with_v(lambda_run):
    run = lambda_run(2, REPO / "apps" / "pi.py", "--samples", "1000")
    assert run.returncode == 0, run.stderr
    assert "links:" not in run.stderr, run.stderr
