"""The emulator itself: the canary that guards the moto hook, and the platform behaviour the fmpi tests rely on."""

from __future__ import annotations

import io
import json
import os
import sys
import time
import uuid
import zipfile

import pytest
from fmpi.lambda_local.canary import TESTED_MOTO, ShimIncompatible, check_awslambdaric, check_moto_compat

HANDLERS = '''
import json, os, sys, time

def echo(event, context):
    return {"event": event, "remaining_ms": context.get_remaining_time_in_millis(),
            "arn": context.invoked_function_arn, "pid": os.getpid(), "path": sys.path[:3]}

def numpy_version(event, context):
    import numpy
    return numpy.__version__

def sleepy(event, context):
    time.sleep(event["sleep"])
'''


def _zip(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def _create(moto, handler: str, timeout: int = 5) -> str:
    lam = moto.client()
    name = "emu-" + uuid.uuid4().hex[:8]
    lam.create_function(FunctionName=name, Runtime="python3.11", Role=moto.role_arn, Handler=handler,
                        Code={"ZipFile": _zip({"h.py": HANDLERS})}, Timeout=timeout)
    lam.get_waiter("function_active_v2").wait(FunctionName=name)
    return name


def test_canary_passes_on_the_pinned_moto(runtime_site):
    import moto

    assert moto.__version__ in TESTED_MOTO, f"moto {moto.__version__}: re-verify src/fmpi/lambda_local and update TESTED_MOTO"
    check_moto_compat()
    assert check_awslambdaric(sys.executable, runtime_site)


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
