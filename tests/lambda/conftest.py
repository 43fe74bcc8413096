"""Fixtures for the Lambda backend tests: moto's server in-process, with invocations that really run.

* ``runtime_site``: the packages the AWS Python runtime has (and nothing else);
  handlers run with ``python -S`` and only that on their path, so the
  deployment zip must bring fmpi, numpy and powertools itself.
* ``moto_server`` (session): ``fmpi.lambda_local.server.MotoLambdaServer``, with ``faults``
  that tests set (drop or duplicate a rank's invocation, or run ranks in
  network namespaces); ``moto`` (per test) resets the faults and, after the
  test, checks that every invocation has ended (no rank keeps billing).
* ``lambda_run``: ``fmpirun --backend lambda`` as a subprocess, configured only
  through its command line and ``AWS_*`` variables pointing at the server.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from fmpi.lambda_local.runtime_site import build_runtime_site
from fmpi.lambda_runtime.runtimes import default_architecture, default_runtime
from fmpi.launcher.lambda_backend import packaging
from fmpi.launcher.lambda_backend.target_deps import target_dependencies
from fmpi.lambda_local.server import MotoLambdaServer
from lambda_testing import FMPIRUN, Faults, Run, aws_env


@pytest.fixture(scope="session")
def runtime_site(tmp_path_factory) -> str:
    return build_runtime_site(str(tmp_path_factory.mktemp("lambda-runtime") / "site"))


@pytest.fixture(scope="session")
def bundle_cache(tmp_path_factory) -> Path:
    """FMPI_CACHE_DIR of this worker's jobs, with the runtime's dependencies already built: the first job's
    packaging would otherwise spend a minute in pip inside a test's timing (and the NAT lab reaches no index)."""
    cache = tmp_path_factory.mktemp("fmpi-cache")
    target_dependencies(packaging.TARGET_REQUIREMENTS, default_runtime(), default_architecture(), cache / "lambda")
    return cache


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory, runtime_site):
    faults = Faults()
    srv = MotoLambdaServer(
        str(tmp_path_factory.mktemp("moto-lambda")),
        runtime_site=runtime_site,
        retry_delay_s=0.2,
        placement=faults.place,
    )
    srv.ctrl.deliveries = faults.deliveries
    srv.ctrl.start_delay = faults.start_delay
    srv.ctrl.throttle = faults.throttles
    srv.start()
    srv.faults = faults
    srv.role_arn = srv.create_role()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def moto(moto_server):
    moto_server.faults.clear()
    moto_server.ctrl.concurrency_limit = 1000
    moto_server.ctrl.role_propagation_s = 0.0
    yield moto_server
    moto_server.faults.clear()
    moto_server.ctrl.concurrency_limit = 1000
    moto_server.ctrl.role_propagation_s = 0.0
    # Every invocation of the test must have ended by now: no rank keeps billing.
    idle = moto_server.ctrl.wait_idle(30)
    running = moto_server.executor.running()
    assert idle and not running, f"emulated ranks still running after the job ended (pids {running})"


@pytest.fixture
def lambda_run(moto, bundle_cache):
    """lambda_run(n, program, *args, extra=(), env=None) -> Run of fmpirun --backend lambda against moto."""

    def run(n: int, program: Path | str, *args: str, extra: tuple[str, ...] = (), env: dict | None = None,
            role: bool = True, timeout: float = 180) -> Run:
        argv = [FMPIRUN, "--backend", "lambda", "-n", str(n), "--relay-listen", "127.0.0.1:0",
                "--timeout", "60", "--fill-timeout", "30"]
        if role:
            argv += ["--role", moto.role_arn]
        argv += [*extra, "python", str(program), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=env or aws_env(moto.endpoint_url, bundle_cache))
        return Run(proc.returncode, proc.stdout, proc.stderr)

    return run
