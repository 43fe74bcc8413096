"""A LocalStack ``RuntimeExecutor`` whose execution environments are local awslambdaric processes.

Without Docker, LocalStack cannot start its Lambda containers (and its own
Go init, ``/var/rapid/init``, is a Linux container binary). This executor
takes their place: one execution environment is one
``<python> -S -m awslambdaric <handler>`` process that talks to the same
Runtime API stand-in fmpi-lambda-local uses (``fmpi.lambda_local.runtime_api``, from the fmpi
installed in LocalStack's environment without its dependencies, see scripts/localstack-stage.sh).

The contract with localstack-core 4.13.1 (``services/lambda_/invocation``):

* ``start(env_vars)`` blocks until the environment is ready (the runtime
  asked for its first event); an init failure raises
  ``StatusErrorException(payload=...)``, which LocalStack returns as the
  invocation's error;
* ``invoke(payload) -> InvocationResult``; LocalStack reuses a warm
  environment for later invocations (as Lambda does), so one process may
  serve several ranks of several jobs one after the other;
* the function timeout is enforced here (LocalStack leaves it to the Go
  init): on a timeout or a crash the process group is killed and the next
  invocation starts a fresh process, as Lambda resets a sandbox;
* ``prepare_version`` only unzips the code. It must not call
  ``get_runtime_client_path()``: that imports ``localstack.packages``, which
  fails on Python 3.11 in 4.13.1 (``Lock | None`` on a builtin).

Environment (set by the test fixture, passed through LocalStack):
``FMPI_LAMBDA_PYTHON`` (an interpreter with awslambdaric) and
``FMPI_LAMBDA_RUNTIME_SITE`` (the runtime's packages; see fmpi/lambda_local/runtime_site.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from localstack import config
from localstack.services.lambda_.invocation.executor_endpoint import (
    StatusErrorException,
)
from localstack.services.lambda_.invocation.lambda_models import (
    FunctionVersion,
    InvocationResult,
)
from localstack.services.lambda_.invocation.runtime_executor import RuntimeExecutor

from fmpi.lambda_local.runtime_api import Invocation, RuntimeAPIServer
from fmpi.lambda_local.sandbox import function_cpus

LOG = logging.getLogger(__name__)
PYTHON = os.environ.get("FMPI_LAMBDA_PYTHON", sys.executable)
RUNTIME_SITE = os.environ.get("FMPI_LAMBDA_RUNTIME_SITE")


class ProcessRuntimeExecutor(RuntimeExecutor):
    def __init__(self, id: str, function_version: FunctionVersion) -> None:
        super().__init__(id=id, function_version=function_version)
        self.proc: subprocess.Popen | None = None
        self.api: RuntimeAPIServer | None = None
        self.env: dict[str, str] = {}
        self.log_path = os.path.join(tempfile.gettempdir(), f"lambda-{id}.log")
        self._log_f = None

    # ------------------------------------------------------------- lifecycle
    def _spawn(self) -> None:
        code_dir = str(self.function_version.config.code.get_unzipped_code_location())
        self.api = RuntimeAPIServer()
        pythonpath = [code_dir] + ([RUNTIME_SITE] if RUNTIME_SITE else [])
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONUNBUFFERED": "1",
            **{k: str(v) for k, v in self.env.items()},
            "PYTHONPATH": os.pathsep.join(pythonpath),
            "LAMBDA_TASK_ROOT": code_dir,
            "AWS_LAMBDA_RUNTIME_API": self.api.address,
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{self.function_version.config.runtime}",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        self._log_f = open(self.log_path, "ab")
        argv = [PYTHON, *(["-S"] if RUNTIME_SITE else []), "-m", "awslambdaric", self.function_version.config.handler]
        # Pinned to the function's vCPUs, as fmpi-lambda-local's functions (fmpi.lambda_local.sandbox.function_cpus)
        cpus = function_cpus(int(self.function_version.config.memory_size))
        self.proc = subprocess.Popen(argv, cwd=code_dir, env=env, stdin=subprocess.DEVNULL, stdout=self._log_f,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        # Ready: the runtime asks for its first event (the handler module imported).
        deadline = time.time() + config.LAMBDA_RUNTIME_ENVIRONMENT_TIMEOUT
        while self.api.first_next_at is None:
            if self.api.init_error is not None or self.proc.poll() is not None or time.time() > deadline:
                body = (self.api.init_error or (b"", None))[0] or json.dumps({
                    "errorType": "Runtime.ExitError",
                    "errorMessage": f"Runtime exited during init: {self.proc.poll()}"}).encode()
                self._kill()
                raise StatusErrorException("Environment startup failed", payload=body)
            time.sleep(0.005)

    def start(self, env_vars: dict[str, str]) -> None:
        self.env = dict(env_vars)
        self._spawn()

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=5)
        if self.api:
            threading.Thread(target=self.api.close, daemon=True).start()
        if self._log_f:
            self._log_f.close()
            self._log_f = None

    def stop(self) -> None:
        self._kill()

    # ------------------------------------------------------------- addresses
    def get_address(self) -> str:
        return "127.0.0.1"

    def get_endpoint_from_executor(self) -> str:
        return "127.0.0.1"  # AWS_ENDPOINT_URL / LOCALSTACK_HOSTNAME inside the function

    def get_runtime_endpoint(self) -> str:
        return f"http://127.0.0.1:{config.GATEWAY_LISTEN[0].port}/_localstack_lambda/{self.id}"

    # ---------------------------------------------------------------- invoke
    def invoke(self, payload: dict[str, str]) -> InvocationResult:
        if self.proc is None or self.proc.poll() is not None:
            self._spawn()  # the environment was reset after a timeout or a crash
        timeout = float(self.function_version.config.timeout)
        inv = Invocation(request_id=payload["invoke-id"], payload=(payload["payload"] or "{}").encode(),
                         timeout_s=timeout, function_arn=payload["invoked-function-arn"],
                         trace_id=payload.get("trace-id") or "")
        start_size = os.path.getsize(self.log_path)
        self._log_f.write(f"START RequestId: {inv.request_id} Version: {self.function_version.id.qualifier}\n".encode())
        self._log_f.flush()
        self.api.submit(inv)
        proc = self.proc
        while not inv.done.wait(0.01):
            if proc.poll() is not None:
                inv.finish("exit", json.dumps({
                    "errorType": "Runtime.ExitError",
                    "errorMessage": f"RequestId: {inv.request_id} Error: Runtime exited with error: exit status {proc.returncode}"}).encode())
            elif inv.deadline_ms and time.time() * 1000 > inv.deadline_ms:
                inv.finish("timeout", json.dumps({
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": f"RequestId: {inv.request_id} Error: Task timed out after {timeout:.2f} seconds"}).encode())
        duration = ((inv.finished_at or time.time()) - (inv.delivered_at or time.time())) * 1000
        if inv.outcome == "timeout":
            self._log_f.write(f"{inv.request_id} Task timed out after {timeout:.2f} seconds\n".encode())
        self._log_f.write(f"END RequestId: {inv.request_id}\nREPORT RequestId: {inv.request_id}\t"
                          f"Duration: {duration:.2f} ms\tBilled Duration: {int(duration) + 1} ms\t"
                          f"Memory Size: {self.function_version.config.memory_size} MB\n".encode())
        self._log_f.flush()
        if inv.outcome != "response":
            self._kill()  # Lambda resets the sandbox after a timeout or a crash
        with open(self.log_path, "rb") as f:
            f.seek(start_size)
            logs = f.read().decode("utf-8", "replace")
        return InvocationResult(request_id=inv.request_id, payload=inv.body, is_error=inv.outcome != "response", logs=logs)

    def get_logs(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # ----------------------------------------------------------- class-level
    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        if function_version.config.code:
            function_version.config.code.prepare_for_execution()  # unzip to $TMPDIR/lambda/...

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        pass

    @classmethod
    def validate_environment(cls) -> bool:
        argv = [PYTHON, *(["-S"] if RUNTIME_SITE else []), "-c", "import awslambdaric, runtime_client"]
        env = {**os.environ, **({"PYTHONPATH": RUNTIME_SITE} if RUNTIME_SITE else {})}
        if subprocess.run(argv, capture_output=True, env=env).returncode != 0:
            LOG.warning("fmpi-process executor: awslambdaric is not importable by %s", PYTHON)
            return False
        return True
