"""The emulator itself (fmpi-lambda-local): the canary that guards the moto hook, the platform behaviour the fmpi
tests rely on, and what it enforces as Lambda does (memory, read-only code, /tmp, glibc, environment)."""

from __future__ import annotations

import io
import json
import os
import sys
import time
import uuid
import zipfile

from pathlib import Path

import pytest

from fmpi.lambda_local.sandbox import capabilities, function_cpus
from fmpi.lambda_local.canary import TESTED_MOTO, ShimIncompatible, check_awslambdaric, check_moto_compat

HANDLERS = '''
import json, os, sys, time

def echo(event, context):
    return {"event": event, "remaining_ms": context.get_remaining_time_in_millis(),
            "arn": context.invoked_function_arn, "pid": os.getpid(), "path": sys.path[:3],
            "request_id": context.aws_request_id}

def numpy_version(event, context):
    import numpy
    return numpy.__version__

def allocate(event, context):
    blocks = [bytearray(1 << 20) for _ in range(event["mb"])]  # touched: counted as used memory
    return len(blocks)

def write_code_folder(event, context):
    try:
        with open(os.path.join(os.environ["LAMBDA_TASK_ROOT"], "new.txt"), "w") as f:
            f.write("x")
        return "written"
    except OSError as exc:
        return exc.strerror

def fill_tmp(event, context):
    written = 0
    seen_host_file = os.path.exists(event["host_file"])
    try:
        with open("/tmp/fill", "wb") as f:
            while written < event["mb"]:
                f.write(bytes(1 << 20))
                f.flush()
                written += 1
    except OSError as exc:
        return {"written_mb": written, "error": exc.strerror, "seen_host_file": seen_host_file}
    finally:
        if os.path.exists("/tmp/fill"):
            os.unlink("/tmp/fill")
    return {"written_mb": written, "error": None, "seen_host_file": seen_host_file}

def environment(event, context):
    return sorted(os.environ)

def import_numpy(event, context):
    import numpy
    return numpy.__version__

def sleepy(event, context):
    time.sleep(event["sleep"])

def cpus(event, context):
    return sorted(os.sched_getaffinity(0))
'''


def _zip(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def _create(moto, handler: str, timeout: int = 5, **config) -> str:
    lam = moto.client()
    name = "emu-" + uuid.uuid4().hex[:8]
    lam.create_function(FunctionName=name, Runtime="python3.11", Role=moto.role_arn, Handler=handler,
                        Code={"ZipFile": _zip({"h.py": HANDLERS})}, Timeout=timeout, **config)
    lam.get_waiter("function_active_v2").wait(FunctionName=name)
    return name


def test_canary_passes_on_the_pinned_moto(runtime_site):
    import moto

    assert moto.__version__ in TESTED_MOTO, f"moto {moto.__version__}: re-verify src/fmpi/lambda_local and update TESTED_MOTO"
    check_moto_compat()
    assert check_awslambdaric(sys.executable, runtime_site)


def test_canary_passes_while_the_emulator_has_moto_patched(moto):
    # (under xdist the canary test may run in a worker whose emulator is up: it read the wrapper's signature)
    check_moto_compat()


def test_canary_detects_drift(monkeypatch):
    from moto.awslambda import models

    monkeypatch.setattr(models.LambdaFunction, "invoke", lambda self, body, headers: b"")
    with pytest.raises(ShimIncompatible, match="signature changed"):
        check_moto_compat()
    monkeypatch.undo()

    def invoke(self, function_name, qualifier, body, headers, response_headers):
        return self.get_function(function_name, qualifier).run(body)  # a hypothetical refactor

    monkeypatch.setattr(models.LambdaBackend, "invoke", invoke)
    with pytest.raises(ShimIncompatible, match="no longer calls fn.invoke"):
        check_moto_compat()


def test_request_response_runs_in_its_own_process(moto):
    lam = moto.client()
    name = _create(moto, "h.echo", timeout=7)
    reply = lam.invoke(FunctionName=name, Payload=json.dumps({"x": [1, 2]}))
    body = json.loads(reply["Payload"].read())
    assert reply["StatusCode"] == 200 and "FunctionError" not in reply
    assert body["event"] == {"x": [1, 2]}
    assert 6000 < body["remaining_ms"] <= 7000
    assert body["arn"].endswith(f":function:{name}")
    assert body["pid"] != os.getpid()
    assert reply["ResponseMetadata"]["RequestId"] == body["request_id"]  # as on AWS: the invocation's own id


def test_runtime_has_only_what_aws_provides(moto):
    lam = moto.client()
    reply = lam.invoke(FunctionName=_create(moto, "h.numpy_version"))
    assert reply["FunctionError"] == "Unhandled"
    error = json.loads(reply["Payload"].read())
    assert error["errorType"] == "ModuleNotFoundError" and "numpy" in error["errorMessage"]


def test_function_timeout_kills_the_process(moto):
    lam = moto.client()
    name = _create(moto, "h.sleepy", timeout=1)
    t0 = time.monotonic()
    reply = lam.invoke(FunctionName=name, Payload=json.dumps({"sleep": 30}))
    error = json.loads(reply["Payload"].read())
    assert error["errorType"] == "Sandbox.Timedout" and "Task timed out after 1.00 seconds" in error["errorMessage"]
    assert time.monotonic() - t0 < 4
    with pytest.raises(ProcessLookupError):
        os.kill(moto.ctrl.history[-1]["pid"], 0)  # the runtime process (the sandbox's wrappers exec it)


def test_event_invocations_are_asynchronous(moto):
    lam = moto.client()
    name = _create(moto, "h.sleepy", timeout=3)
    t0 = time.monotonic()
    reply = lam.invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps({"sleep": 1}))
    assert reply["StatusCode"] == 202
    assert time.monotonic() - t0 < 0.5  # stock moto would run it (or try Docker) before answering
    assert moto.ctrl.wait_idle(10)
    # The id Invoke answered is the one the invocation runs under (its START and REPORT lines): fmpirun names it.
    assert moto.ctrl.history[-1]["request_id"] == reply["ResponseMetadata"]["RequestId"]


def _call(moto, name: str, event: dict | None = None) -> tuple[str | None, object]:
    reply = moto.client().invoke(FunctionName=name, Payload=json.dumps(event or {}))
    return reply.get("FunctionError"), json.loads(reply["Payload"].read())


def test_memory_size_is_a_hard_limit(moto):
    if not capabilities()["memory"]:
        pytest.skip("memory limits need root and a writable memory cgroup")
    name = _create(moto, "h.allocate", timeout=20, MemorySize=256)
    assert _call(moto, name, {"mb": 64}) == (None, 64)
    error, body = _call(moto, name, {"mb": 400})
    assert error == "Unhandled" and body["errorType"] == "Runtime.OutOfMemory", body
    assert "Runtime exited with error: signal: kill" in body["errorMessage"]


def test_a_function_runs_on_the_vcpus_its_memory_buys(moto):
    """One core per 1769 MB (at least one, at most this machine's), the next ones round robin: numeric
    libraries then start as many threads as on Lambda, and functions do not all crowd the same core."""
    host = sorted(os.sched_getaffinity(0))
    small = _create(moto, "h.cpus", MemorySize=1769)
    seen = [_call(moto, small)[1] for _ in range(2 * len(host))]
    assert all(len(cores) == 1 and cores[0] in host for cores in seen), seen
    assert sorted({cores[0] for cores in seen}) == host, "round robin over the machine's cores"
    large = _create(moto, "h.cpus", MemorySize=10240)
    assert _call(moto, large)[1] == host  # six vCPUs: every core there is


def test_function_cpus_counts_vcpus_and_goes_round_robin():
    picks = [function_cpus(1769, [0, 1, 2, 3]) for _ in range(4)]
    assert len({frozenset(p) for p in picks}) == 4 and all(len(p) == 1 for p in picks)
    assert function_cpus(3538, [0, 1, 2, 3]) | function_cpus(3538, [0, 1, 2, 3]) == {0, 1, 2, 3}
    assert function_cpus(128, [5]) == {5} and len(function_cpus(10240, list(range(16)))) == 6


def test_code_folder_is_read_only(moto):
    error, body = _call(moto, _create(moto, "h.write_code_folder"))
    assert error is None and body in ("Read-only file system", "Permission denied"), body


def test_tmp_is_private_and_limited_to_the_ephemeral_storage(moto, tmp_path):
    if not capabilities()["tmp"]:
        pytest.skip("a private /tmp needs root (a mount namespace)")
    host_file = tmp_path / "on-the-host"  # under /tmp on this machine
    host_file.write_text("not for functions")
    name = _create(moto, "h.fill_tmp", timeout=60, MemorySize=2048, EphemeralStorage={"Size": 512})
    error, body = _call(moto, name, {"mb": 600, "host_file": str(host_file)})
    assert error is None, body
    assert body["error"] == "No space left on device" and 480 <= body["written_mb"] <= 512, body
    assert body["seen_host_file"] is False


def test_environment_is_what_lambda_provides(moto, monkeypatch):
    monkeypatch.setenv("FMPI_CHANNEL", "relay")  # set in the process that runs the emulator: must not leak
    error, names = _call(moto, _create(moto, "h.environment"))
    assert error is None, names
    assert not [n for n in names if n.startswith("FMPI_")], names
    lambda_like = ("AWS_", "LAMBDA_", "_HANDLER", "_X_AMZN", "PATH", "LANG", "TZ", "HOME", "TMPDIR", "PYTHON", "LD_",
                   "PWD", "LC_CTYPE")  # (the last two: set by the sandbox's shell and by Python's locale coercion)
    assert [n for n in names if not n.startswith(lambda_like)] == [], names


def test_a_library_built_for_a_newer_glibc_fails_to_import_as_on_the_runtime(moto, tmp_path):
    import numpy

    from fmpi.launcher.lambda_backend import packaging
    from fmpi.util.elf import library_needs

    umath = next((Path(numpy.__file__).parent / "_core").glob("_multiarray_umath.*.so"))
    needs = library_needs(umath).glibc
    if needs is None or needs <= (2, 26):
        pytest.skip(f"this numpy needs glibc {needs}, which the python3.11 runtime has")
    entries: dict = {}
    for dist in packaging._closure(("numpy",)):
        packaging._add_distribution(entries, dist)
    layer = tmp_path / "layer.zip"
    with zipfile.ZipFile(layer, "w", zipfile.ZIP_STORED) as zf:
        for arcname, source in sorted(entries.items()):
            zf.write(source, "python/" + arcname)
    lam = moto.client()
    arn = lam.publish_layer_version(LayerName="local-numpy", Content={"ZipFile": layer.read_bytes()})["LayerVersionArn"]
    error, body = _call(moto, _create(moto, "h.import_numpy", timeout=30, Layers=[arn]))
    assert error == "Unhandled", body
    assert f"version `GLIBC_{needs[0]}.{needs[1]}' not found" in body["errorMessage"], body


def test_fmpi_lambda_local_serves_until_interrupted(tmp_path):
    import signal
    import subprocess

    import boto3

    binary = Path(sys.executable).parent / "fmpi-lambda-local"
    proc = subprocess.Popen([str(binary), "--port", "0", "--work-dir", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("fmpi-lambda-local: a Lambda endpoint on http://"), first + proc.stderr.read()
        endpoint = first.split(" on ")[1].split()[0]
        banner = "".join(proc.stdout.readline() for _ in range(6))
        assert "enforced:" in banner and f"AWS_ENDPOINT_URL={endpoint}" in banner, banner
        lam = boto3.client("lambda", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test")
        assert lam.list_functions()["Functions"] == []
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test")
        assert iam.get_role(RoleName="fmpi-rank")["Role"]["Arn"].endswith(":role/fmpi-rank")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "fmpi-lambda-local: stopped" in out
