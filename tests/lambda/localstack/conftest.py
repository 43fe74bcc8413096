"""LocalStack in host mode (no Docker), started from its own virtual environment for the test session.

``scripts/localstack-stage.sh`` builds that environment and sets
``FMPI_LOCALSTACK_PYTHON``; without it these tests skip. LocalStack runs the
functions through fmpi's ``fmpi-process`` executor plugin
(``tests/lambda/localstack_plugin``): every execution environment is a local
awslambdaric process with only the AWS runtime's packages on its path.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from lambda_testing import FMPIRUN, Run, aws_env

LS_PYTHON = os.environ.get("FMPI_LOCALSTACK_PYTHON")
S3_TMP = "/tmp/localstack-s3-storage"  # hard-coded in LocalStack 4.13.1 (not under FILESYSTEM_ROOT or TMPDIR)


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    skip = pytest.mark.skip(reason="LocalStack stage only: bash scripts/localstack-stage.sh (sets FMPI_LOCALSTACK_PYTHON)")
    for item in items:
        if not LS_PYTHON and here in Path(str(item.path)).parents:
            item.add_marker(skip)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def localstack(tmp_path_factory, runtime_site):
    """The gateway URL of a LocalStack that runs Lambda functions as local processes."""
    probe = subprocess.run(
        [LS_PYTHON, "-c", "from importlib.metadata import entry_points;"
         "print(' '.join(e.name for e in entry_points(group='localstack.lambda.runtime_executor')))"],
        capture_output=True, text=True, timeout=60,
    )
    assert "fmpi-process" in probe.stdout.split(), f"the fmpi-process executor plugin is not installed: {probe.stderr}"
    root = tmp_path_factory.mktemp("localstack")
    port = _free_port()
    s3_existed = os.path.exists(S3_TMP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON"))}
    env.update(
        OVERRIDE_IN_DOCKER="0",  # host mode: this is not the LocalStack container
        FILESYSTEM_ROOT=str(root / "fs"),
        TMPDIR=str(root / "tmp"),  # Lambda code is unzipped under $TMPDIR/lambda
        GATEWAY_LISTEN=f"127.0.0.1:{port}",
        DNS_ADDRESS="0",  # no DNS server on port 53
        DISABLE_EVENTS="1",  # no analytics
        SKIP_SSL_CERT_DOWNLOAD="1",
        SERVICES="lambda,iam,sts,logs,s3",
        LAMBDA_RUNTIME_EXECUTOR="fmpi-process",
        LAMBDA_RETRY_BASE_DELAY="1",
        LAMBDA_KEEPALIVE_MS="60000",
        FMPI_LAMBDA_PYTHON=sys.executable,
        FMPI_LAMBDA_RUNTIME_SITE=runtime_site,
    )
    os.makedirs(env["TMPDIR"])
    log_path = root / "localstack.log"
    log = open(log_path, "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen([LS_PYTHON, "-m", "localstack.runtime.main"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/_localstack/health", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - t0 > 90:
                    raise RuntimeError(f"LocalStack did not start:\n{log_path.read_text()[-4000:]}") from None
                time.sleep(0.1)
        print(f"\nLocalStack ready in {time.monotonic() - t0:.1f} s on {url}")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # Function processes are in their own sessions; LocalStack stops them on SIGTERM,
        # and they exit on their own when their Runtime API goes away.
        log.close()
        if not s3_existed:
            shutil.rmtree(S3_TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def ls_role(localstack) -> str:
    import boto3

    iam = boto3.client("iam", endpoint_url=localstack, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    trust = ('{"Version":"2012-10-17","Statement":[{"Effect":"Allow",'
             '"Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}')
    try:
        return iam.create_role(RoleName="fmpi-rank", AssumeRolePolicyDocument=trust)["Role"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        return iam.get_role(RoleName="fmpi-rank")["Role"]["Arn"]


@pytest.fixture
def ls_run(localstack, ls_role, bundle_cache):
    """`run(n, program, *args)`: fmpirun --backend localstack against the session's LocalStack."""
    def run(n: int, program, *args: str, extra: tuple[str, ...] = (), via_env: bool = False, timeout: float = 240,
            env: dict[str, str] | None = None) -> Run:
        argv = [FMPIRUN, "--backend", "localstack", "-n", str(n), "--relay-listen", "127.0.0.1:0",
                "--role", ls_role, "--timeout", "60", "--fill-timeout", "30", *extra]
        env = {**aws_env(None, bundle_cache, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None), **(env or {})}
        if via_env:
            env["AWS_ENDPOINT_URL"] = localstack  # honoured as on any boto3 client
        else:
            argv += ["--endpoint-url", localstack]
        proc = subprocess.run([*argv, "python", str(program), *args], capture_output=True, text=True,
                              timeout=timeout, env=env)
        return Run(proc.returncode, proc.stdout, proc.stderr)

    return run
