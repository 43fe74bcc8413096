"""Fail loudly when moto's or awslambdaric's internals drift under the emulator.

``LambdaExecController.install()`` runs ``check_moto_compat()`` before it
patches anything, and ``test_lambda_emulator.py`` runs both checks, so a moto
upgrade that moves the hook point breaks one named test with a message that
says what changed, instead of hanging the end-to-end tests.
"""

from __future__ import annotations

import base64
import inspect
import io
import os
import subprocess
import sys
import warnings
import zipfile
from types import ModuleType

TESTED_MOTO = ("5.2.1", "5.2.5")  # versions this shim was verified against


class ShimIncompatible(RuntimeError):
    pass


def _fail(msg: str) -> None:
    raise ShimIncompatible(f"lambda emulator canary: {msg} -- re-verify src/fmpi/lambda_local against this moto version")


def check_moto_compat() -> None:
    import moto
    from moto.awslambda import models, responses, urls
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    ver = moto.__version__
    if not ver.startswith("5."):
        _fail(f"moto {ver} is not 5.x")
    if ver not in TESTED_MOTO:
        warnings.warn(f"lambda emulator: moto {ver} not in tested set {TESTED_MOTO}", stacklevel=2)

    _check_invoke_path(models, responses, urls)
    _check_function_attributes(models)

    # 6. the role-propagation hook, and what it reads
    params = list(inspect.signature(models.LambdaBackend.create_function).parameters)
    if params != ["self", "spec"]:
        _fail(f"LambdaBackend.create_function signature changed: {params}")
    from moto.iam.models import IAMBackend, Role

    if not callable(getattr(IAMBackend, "get_role_by_arn", None)) or "create_date" not in inspect.getsource(Role.__init__):
        _fail("IAMBackend.get_role_by_arn / Role.create_date changed")

    # 7. the in-process server API used by the fixture
    for m in ("start", "stop", "get_host_and_port"):
        if not hasattr(ThreadedMotoServer, m):
            _fail(f"ThreadedMotoServer.{m} missing")


def _check_invoke_path(models: ModuleType, responses: ModuleType, urls: ModuleType) -> None:
    """The invoke path the emulator patches: the method, its callers, the response layer, the URL table."""
    # 1. the patched method: exists, same signature
    inv = getattr(models.LambdaFunction, "invoke", None)
    if inv is None:
        _fail("LambdaFunction.invoke is gone")
    if not getattr(inv, "__wrapped_by_lambda_emulator__", False):
        params = list(inspect.signature(inv).parameters)
        if params != ["self", "body", "request_headers", "response_headers"]:
            _fail(f"LambdaFunction.invoke signature changed: {params}")

    # 2. the callers still route through fn.invoke(...)
    src = inspect.getsource(models.LambdaBackend.invoke)
    if "fn.invoke(body, headers, response_headers)" not in src:
        _fail("LambdaBackend.invoke no longer calls fn.invoke(body, headers, response_headers)")
    params = list(inspect.signature(models.LambdaBackend.invoke).parameters)
    if params != ["self", "function_name", "qualifier", "body", "headers", "response_headers"]:
        _fail(f"LambdaBackend.invoke signature changed: {params}")

    # 3. the response layer still maps Event -> 202 and passes our headers through
    rsrc = inspect.getsource(responses.LambdaResponse.invoke)
    for needle in ('"X-Amz-Invocation-Type"', "202", "self.backend.invoke("):
        if needle not in rsrc:
            _fail(f"LambdaResponse.invoke changed (missing {needle!r})")

    # 4. the request id moto stamps on every answer (x-amzn-requestid), which the emulator keeps for Invoke
    #    (read on BaseResponse: the emulator, when it is up, overrides it on LambdaResponse only)
    from moto.core import responses as core_responses

    enrich = inspect.getattr_static(core_responses.BaseResponse, "_enrich_response", None)
    stamp = getattr(core_responses, "gen_amzn_requestid_long", None)
    if not isinstance(enrich, staticmethod) or stamp is None or "x-amzn-requestid" not in inspect.getsource(stamp):
        _fail("BaseResponse._enrich_response no longer stamps x-amzn-requestid with gen_amzn_requestid_long")

    # 5. URL table we extend for GetAccountSettings
    if not isinstance(getattr(urls, "url_paths", None), dict):
        _fail("moto.awslambda.urls.url_paths is not a dict any more")
    if not hasattr(responses.LambdaResponse, "dispatch"):
        _fail("LambdaResponse.dispatch missing")


def _check_function_attributes(models: ModuleType) -> None:
    """The attributes spec_from_moto() reads, on a real (unregistered) LambdaFunction."""
    # 5. attributes spec_from_moto() reads, on a real (unregistered) LambdaFunction
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("h.py", "def handler(e, c):\n    return e\n")
    fn = models.LambdaFunction(
        account_id="123456789012",
        spec={"FunctionName": "lambda-emulator-canary", "Handler": "h.handler",
              "Role": "arn:aws:iam::123456789012:role/x", "Runtime": "python3.11",
              "Code": {"ZipFile": base64.b64encode(buf.getvalue()).decode()}},
        region="us-east-1", version="$LATEST")
    for attr in ("code_bytes", "code_digest", "code_size", "function_arn", "function_name",
                 "handler", "run_time", "timeout", "memory_size", "version", "region", "account_id",
                 "environment_vars", "event_invoke_config", "package_type", "reserved_concurrency", "layers"):
        if not hasattr(fn, attr):
            _fail(f"LambdaFunction has no attribute {attr!r}")
    if fn.code_bytes != buf.getvalue():
        _fail("LambdaFunction.code_bytes is no longer the raw zip")
    if not callable(getattr(fn, "save_logs", None)):
        _fail("LambdaFunction.save_logs missing")
    if not (hasattr(fn, "logs_group_name") and callable(getattr(fn.logs_backend, "ensure_log_group", None))):
        _fail("LambdaFunction.logs_group_name / logs_backend.ensure_log_group missing")
    if not callable(getattr(models.LambdaBackend, "layers_versions_by_arn", None)):
        _fail("LambdaBackend.layers_versions_by_arn missing")
    for attr in ("code_bytes", "code_digest"):
        if attr not in inspect.getsource(models.LayerVersion.__init__):
            _fail(f"LayerVersion no longer sets {attr}")
    if "config" not in inspect.signature(models.EventInvokeConfig.__init__).parameters:
        _fail("EventInvokeConfig(config=...) changed")
    for attr in ("architectures", "ephemeral_storage"):
        if not hasattr(fn, attr):
            _fail(f"LambdaFunction has no attribute {attr!r}")


def check_awslambdaric(python: str = sys.executable, runtime_site: str | None = None) -> str:
    """awslambdaric (with its C extension) must import in the handler interpreter, as the emulator runs it."""
    code = ("import awslambdaric, awslambdaric.__main__ as m, awslambdaric.bootstrap as b, runtime_client;"
            "assert callable(m.main) and callable(b.run) and callable(runtime_client.next);"
            "print(awslambdaric.__version__)")
    argv = [python, "-c", code]
    env = None
    if runtime_site:
        argv = [python, "-S", "-c", code]
        env = {**os.environ, "PYTHONPATH": runtime_site}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    if r.returncode != 0:
        raise ShimIncompatible(f"lambda emulator canary: awslambdaric unusable in {python}: {r.stderr.strip()}")
    return r.stdout.strip()
