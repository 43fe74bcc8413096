"""Run Lambda invocations as local processes: one ``awslambdaric`` process per invocation.

Backend-agnostic (knows nothing about moto): ``ProcessExecutor.invoke()``
extracts the function's zip (once per code digest), starts
``<python> [-S] -c BOOT <handler>`` in a fresh session with the environment
Lambda gives a function, hands it exactly one event through a private
``RuntimeAPIServer``, enforces the init timeout and the function timeout
(SIGKILL of the whole process group), and returns payload, error, logs and
timings.

What Lambda enforces is enforced here too (``sandbox``): the memory size,
a read-only code folder, a private size-limited /tmp (with root), the
runtime's Python version and architecture, and every library the function
imports from its code or layers must suit the runtime's glibc (the boot
code refuses to load one that does not, with glibc's message).

Fidelity knobs:

* ``runtime_site``: a directory holding only what the AWS Python runtime
  provides (awslambdaric, boto3 and their dependencies, see
  ``runtime_site.py``). The handler then runs with ``python -S`` and
  ``PYTHONPATH=<task root>:<runtime_site>``, so anything the deployment zip
  forgot to bundle (fmpi itself, numpy, powertools) fails to import, as it
  would on AWS.
* ``placement(spec, payload) -> Placement``: run an invocation inside a
  network namespace (e.g. behind a NAT of the NAT lab), or drop it as a
  platform that never starts the function would.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from ..lambda_runtime.runtimes import RUNTIMES, default_architecture
from ..util import elf
from .boot import BOOT
from .report_lines import peak_memory_kb, write_report
from .runtime_api import Invocation, RuntimeAPIServer
from .sandbox import DEFAULT_TMP_MB, Sandbox, capabilities, function_cpus, make_read_only

INIT_TIMEOUT_S = 10.0  # AWS's limit for the init phase of an on-demand function



@dataclass
class FunctionSpec:
    name: str
    handler: str
    zip_bytes: bytes
    code_sha256: str  # any stable digest of zip_bytes
    function_arn: str
    runtime: str = "python3.11"
    architecture: str = "x86_64"
    timeout_s: float = 3.0
    memory_mb: int = 128
    tmp_mb: int = DEFAULT_TMP_MB  # the function's ephemeral storage (/tmp)
    version: str = "$LATEST"
    region: str = "us-east-1"
    env: dict[str, str] = field(default_factory=dict)
    layers: list[tuple[str, bytes]] = field(default_factory=list)  # (digest, zip) in the function's order


@dataclass
class InvocationResult:
    request_id: str
    payload: bytes
    function_error: str | None  # None or "Unhandled" (the X-Amz-Function-Error header)
    error_type: str | None
    logs: str
    timings: dict[str, float]
    pid: int | None = None


@dataclass
class Placement:
    netns: str | None = None  # run the handler process inside this network namespace
    run: bool = True  # False: the invocation is accepted but never starts
    release: Callable[[], None] | None = None  # called once the invocation's processes are gone


def event_of(payload: bytes) -> dict:
    """The invocation's event as a dict ({} when it is not a JSON object)."""
    try:
        event = json.loads(payload or b"{}")
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


class ProcessExecutor:
    def __init__(
        self,
        work_dir: str,
        python: str = sys.executable,
        runtime_site: str | None = None,
        endpoint_url: str | None = None,
        extra_env: dict[str, str] | None = None,
        init_timeout_s: float = INIT_TIMEOUT_S,
        placement: Callable[[FunctionSpec, bytes], Placement] | None = None,
        enforce: dict[str, bool] | None = None,
    ) -> None:
        self.work_dir = os.path.abspath(work_dir)
        self.python = python
        self.runtime_site = runtime_site
        self.endpoint_url = endpoint_url
        self.extra_env = dict(extra_env or {})
        self.init_timeout_s = init_timeout_s
        self.placement = placement
        self.enforce = capabilities() if enforce is None else enforce
        self._python_runtime: str | None = None
        self._code_lock = threading.Lock()
        self._procs: dict[int, subprocess.Popen] = {}
        self._procs_lock = threading.Lock()
        self._closed = False
        for sub in ("code", "layers", "logs", "tmp", "sock"):
            os.makedirs(os.path.join(self.work_dir, sub), exist_ok=True)

    # ------------------------------------------------------------------ code
    def task_root(self, spec: FunctionSpec) -> str:
        """Extract the zip once per code digest; an update gets a new directory."""
        return self._extract("code", spec.code_sha256, spec.zip_bytes)

    def layer_paths(self, spec: FunctionSpec) -> list[str]:
        """What each layer adds to sys.path (Lambda merges layers into /opt: python/ and its site-packages)."""
        paths = []
        for digest, data in spec.layers:
            root = self._extract("layers", digest, data)
            paths += [os.path.join(root, "python", "lib", spec.runtime, "site-packages"), os.path.join(root, "python")]
        return paths

    def _extract(self, kind: str, digest: str, data: bytes) -> str:
        dest = os.path.join(self.work_dir, kind, digest.replace("/", "_")[:32])
        with self._code_lock:
            if not os.path.isdir(dest):
                tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
                os.makedirs(tmp)
                with zipfile.ZipFile(io.BytesIO(data)) as zf:
                    for info in zf.infolist():
                        path = zf.extract(info, tmp)
                        mode = (info.external_attr >> 16) & 0o777
                        if mode and not info.is_dir():
                            os.chmod(path, mode | 0o444)
                if not self.enforce["tmp"]:  # no mount namespace to make it read-only in: its permissions do
                    make_read_only(tmp)
                os.rename(tmp, dest)
        return dest

    def _sandbox(self, spec: FunctionSpec, request_id: str, code_roots: list[str]) -> Sandbox:
        """The invocation's confinement: its code read-only; what the runtime itself needs stays visible."""
        # The emulator's own elf check (boot.py loads it by path) stays visible too: a checkout under /tmp
        # (a CI clone made with mktemp -d) would otherwise vanish behind the function's private /tmp.
        keep = [self.work_dir, *([self.runtime_site] if self.runtime_site else []),
                os.path.dirname(os.path.dirname(self.python)), os.path.dirname(elf.__file__)]
        return Sandbox(self.work_dir, request_id, spec.memory_mb, read_only=code_roots, keep=keep,
                       tmp_mb=spec.tmp_mb, enforce=self.enforce, cpus=function_cpus(spec.memory_mb))

    def _wait(self, inv: Invocation, spec: FunctionSpec, t_spawn: float) -> None:
        """Until the invocation ends: a response, an error, the process's exit, or a deadline (then it is timed out)."""
        # Init phase: until the runtime asks for its event (or dies, or reports an init error).
        init_deadline = t_spawn + self.init_timeout_s
        while not inv.delivered.is_set() and not inv.done.is_set():
            if time.time() > init_deadline:
                inv.finish("timeout", json.dumps({
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": f"RequestId: {inv.request_id} Error: Init phase timed out after {self.init_timeout_s:.2f} seconds",
                }).encode(), "Sandbox.Timedout")
                return
            inv.delivered.wait(0.01)
        # Invoke phase: until a response, an error, the process's exit, or the deadline.
        if not inv.done.is_set():
            remaining = inv.deadline_ms / 1000.0 - time.time()
            if not inv.done.wait(max(0.0, remaining)):
                inv.finish("timeout", json.dumps({
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": f"RequestId: {inv.request_id} Error: Task timed out after {spec.timeout_s:.2f} seconds",
                }).encode(), "Sandbox.Timedout")

    def _refusal(self, spec: FunctionSpec) -> str | None:
        """Why this machine cannot run `spec` as Lambda would (another Python, another architecture), or None."""
        if self._python_runtime is None:
            version = subprocess.run([self.python, "-c", "import sys; print('python%d.%d' % sys.version_info[:2])"],
                                     capture_output=True, text=True, timeout=60).stdout.strip()
            self._python_runtime = version
        if spec.runtime != self._python_runtime or spec.runtime not in RUNTIMES:
            return (f"this local endpoint runs {self._python_runtime} functions (its own interpreter), not "
                    f"{spec.runtime}: deploy with --runtime {self._python_runtime}, or run the endpoint with "
                    f"Python {spec.runtime.removeprefix('python')}")
        if spec.architecture != default_architecture():
            return (f"this local endpoint runs {default_architecture()} functions (this machine's), not "
                    f"{spec.architecture}: deploy with --arch {default_architecture()} to rehearse here")
        return None

    def running(self) -> list[int]:
        """Pids of handler processes still alive."""
        with self._procs_lock:
            return [pid for pid, p in self._procs.items() if p.poll() is None]

    # ------------------------------------------------------------------- env
    def build_env(self, spec: FunctionSpec, task_root: str, tmp_dir: str, log_stream: str) -> dict[str, str]:
        pythonpath = [task_root, *self.layer_paths(spec)] + ([self.runtime_site] if self.runtime_site else [])
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "en_US.UTF-8",
            "TZ": ":UTC",
            "HOME": tmp_dir,
            "TMPDIR": tmp_dir,
            "PYTHONPATH": os.pathsep.join(pythonpath),
            "PYTHONUNBUFFERED": "1",
            "LAMBDA_TASK_ROOT": task_root,
            "LAMBDA_RUNTIME_DIR": self.runtime_site or os.path.dirname(self.python),
            "_HANDLER": spec.handler,
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{spec.runtime}",
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_VERSION": str(spec.version),
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": log_stream,
            "AWS_REGION": spec.region,
            "AWS_DEFAULT_REGION": spec.region,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_EC2_METADATA_DISABLED": "true",
            "LAMBDA_DISABLE_PREVIEW_WARN": "1",
        }
        if self.endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint_url  # the handler's own SDK calls reach the emulator
        env.update(self.extra_env)
        env.update({k: str(v) for k, v in spec.env.items()})  # the function's Environment wins
        return env

    # ---------------------------------------------------------------- invoke
    def invoke(self, spec: FunctionSpec, payload: bytes, request_id: str | None = None,
               client_context: str | None = None) -> InvocationResult:
        if self._closed:
            raise RuntimeError("executor closed")
        t_submit = time.time()
        request_id = request_id or str(uuid.uuid4())
        placement = self.placement(spec, payload) if self.placement else Placement()
        try:
            return self._invoke_placed(spec, payload, request_id, client_context, t_submit, placement)
        finally:
            if placement.release is not None:
                placement.release()

    def _invoke_placed(self, spec: FunctionSpec, payload: bytes, request_id: str, client_context: str | None,
                       t_submit: float, placement: Placement) -> InvocationResult:
        refused = self._refused_before_start(spec, request_id, t_submit, placement)
        if refused is not None:
            return refused
        task_root = self.task_root(spec)
        layer_roots = sorted({p.split(os.sep + "python")[0] for p in self.layer_paths(spec)})
        sandbox = self._sandbox(spec, request_id, [task_root, *layer_roots])
        tmp_dir = os.path.join(self.work_dir, "tmp", request_id)
        os.makedirs(tmp_dir, exist_ok=True)
        log_dir = os.path.join(self.work_dir, "logs", spec.name)
        os.makedirs(log_dir, exist_ok=True)
        log_path = os.path.join(log_dir, request_id + ".log")
        log_stream = time.strftime("%Y/%m/%d/") + f"[{spec.version}]{request_id.replace('-', '')}"

        sock_path = None
        if placement.netns:
            sock_path = os.path.join(self.work_dir, "sock", request_id[:8] + ".sock")
        api = RuntimeAPIServer(unix_path=sock_path)
        inv = Invocation(
            request_id=request_id, payload=payload or b"{}", timeout_s=float(spec.timeout_s),
            function_arn=spec.function_arn,
            trace_id=f"Root=1-{int(t_submit):08x}-{uuid.uuid4().hex[:24]};Sampled=0",
            client_context=client_context,
        )
        api.submit(inv)
        env = self.build_env(spec, task_root, "/tmp" if sandbox.private_tmp else tmp_dir, log_stream)
        env.update(_boot_env(spec, [task_root, *layer_roots]))
        if sock_path:
            env["_EMU_RUNTIME_SOCK"] = sock_path
        else:
            env["AWS_LAMBDA_RUNTIME_API"] = api.address
        argv = sandbox.command([self.python, *(["-S"] if self.runtime_site else []), "-c", BOOT, spec.handler])
        if placement.netns:
            argv = ["ip", "netns", "exec", placement.netns, *argv]  # ip execs: same pid
        with open(log_path, "wb") as log_f:
            log_f.write(f"START RequestId: {request_id} Version: {spec.version}\n".encode())
            log_f.flush()
            t_spawn = time.time()
            pid, vm_hwm_kb = self._run_handler(argv, task_root, env, sandbox, inv, spec, log_f, t_spawn)
            # httpd.shutdown() waits up to one poll interval: off the hot path.
            threading.Thread(target=api.close, daemon=True).start()
            t_end = time.time()
            init_ms = ((api.first_next_at or t_end) - t_spawn) * 1000
            dur_ms = ((inv.finished_at or t_end) - (inv.delivered_at or t_end)) * 1000
            write_report(log_f, inv, spec, init_ms, dur_ms, vm_hwm_kb)
        shutil.rmtree(tmp_dir, ignore_errors=True)
        with open(log_path, "rb") as f:
            logs = f.read().decode("utf-8", "replace")
        error = inv.outcome != "response"
        return InvocationResult(
            request_id=request_id,
            payload=inv.body,
            function_error="Unhandled" if error else None,
            error_type=inv.error_type if error else None,
            logs=logs,
            pid=pid,
            timings={
                "submit": t_submit, "spawn": t_spawn,
                "init_done": api.first_next_at or 0.0,
                "delivered": inv.delivered_at or 0.0,
                "finished": inv.finished_at or 0.0,
                "init_ms": init_ms, "duration_ms": dur_ms,
                "total_ms": (t_end - t_submit) * 1000,
            },
        )

    def _refused_before_start(self, spec: FunctionSpec, request_id: str, t_submit: float,
                              placement: Placement) -> InvocationResult | None:
        """The result of an invocation that never starts: dropped by a fault, or refused by the runtime check."""
        if not placement.run:
            return InvocationResult(request_id, b"", "Unhandled", "Emulator.Dropped",
                                    "invocation dropped by the emulator (never started)\n", {"submit": t_submit})
        refused = self._refusal(spec)
        if refused is None:
            return None
        body = json.dumps({"errorType": "Runtime.Unavailable", "errorMessage": refused}).encode()
        return InvocationResult(request_id, body, "Unhandled", "Runtime.Unavailable", refused + "\n",
                                {"submit": t_submit})

    def _run_handler(self, argv: list[str], task_root: str, env: dict[str, str], sandbox: Sandbox, inv: Invocation,
                     spec: FunctionSpec, log_f: IO[bytes], t_spawn: float) -> tuple[int, int | None]:
        """Run the handler process until the invocation ends; (pid, peak memory in kB). Nothing outlives it."""
        proc = subprocess.Popen(argv, cwd=task_root, env=env, stdin=subprocess.DEVNULL, preexec_fn=sandbox.enter,
                                stdout=log_f, stderr=subprocess.STDOUT, start_new_session=True)
        with self._procs_lock:
            self._procs[proc.pid] = proc

        def reap() -> None:
            rc = proc.wait()
            how = f"signal: {signal.Signals(-rc).name.lower().removeprefix('sig')}" if rc < 0 else f"exit status {rc}"
            kind = "Runtime.OutOfMemory" if sandbox.out_of_memory() else "Runtime.ExitError"
            inv.finish("exit", json.dumps({
                "errorType": kind,
                "errorMessage": f"RequestId: {inv.request_id} Error: Runtime exited with error: {how}",
            }).encode(), kind)

        reaper = threading.Thread(target=reap, daemon=True, name=f"reap-{proc.pid}")
        reaper.start()
        try:
            self._wait(inv, spec, t_spawn)
        finally:
            vm_hwm_kb = peak_memory_kb(proc.pid)
            _kill_group(proc)
            sandbox.close()
            reaper.join(timeout=5)
            with self._procs_lock:
                self._procs.pop(proc.pid, None)
        return proc.pid, vm_hwm_kb

    def close(self) -> None:
        """Kill every still-running handler process."""
        self._closed = True
        with self._procs_lock:
            procs = list(self._procs.values())
        for p in procs:
            _kill_group(p)


def _boot_env(spec: FunctionSpec, code_roots: list[str]) -> dict[str, str]:
    """What the boot code reads (and removes from the environment): see boot.py."""
    return {
        "_EMU_PPID": str(os.getpid()),
        "_EMU_GLIBC": RUNTIMES[spec.runtime].glibc_text(),
        "_EMU_ARCH": spec.architecture,
        "_EMU_ELF": elf.__file__,
        "_EMU_CODE_ROOTS": os.pathsep.join(os.path.join(root, "") for root in code_roots),
    }


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session=True: pgid == pid
    except ProcessLookupError:
        pass
