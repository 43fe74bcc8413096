"""Hook moto's Lambda backend so that an invocation really runs the zip's handler.

Hook point (moto 5.x, verified on 5.2.1 and 5.2.5)::

    moto.awslambda.models.LambdaFunction.invoke(
        self, body: str, request_headers, response_headers: dict) -> str | bytes

``LambdaBackend.invoke()`` (the Invoke API, after qualifier resolution) and
``LambdaResponse.invoke_async()`` (the legacy InvokeAsync API) call it. It is
the narrowest method that both sees the invocation type header and owns the
response headers (X-Amz-Function-Error, X-Amz-Log-Result). The deeper
``_invoke_lambda(event)`` is no good: stock ``invoke()`` calls it
synchronously for every invocation type, so ``Event`` could never be
asynchronous, and ranks that wait for each other would deadlock.

moto's response layer stays in charge: it turns our return value into 202
(Event), 204 (DryRun) or 200, and drops X-Amz-Log-Result unless LogType=Tail.

An Invoke's answer carries the invocation's own request id (``x-amzn-requestid``,
boto3's ``ResponseMetadata.RequestId``), the one the function sees as
``aws_request_id`` and its START and REPORT lines carry, as on AWS; moto
stamps a random one on every answer, so ``_enrich_response`` of
``LambdaResponse`` keeps ours. (A retry or a second delivery of an Event
invocation runs under an id of its own here; AWS keeps the first.)

Also added: moto 5.2 has no GetAccountSettings route (404); we add the URL
pattern and a ``LambdaResponse.get_account_settings`` method. And IAM's
propagation delay: CreateFunction with a role created less than
``role_propagation_s`` ago fails as on AWS ("The role defined for the
function cannot be assumed by Lambda.", ``LambdaBackend.create_function``). All of this must
be installed before the first Lambda request reaches the server: moto builds
and caches one Flask app per service on first use.

``canary.check_moto_compat()`` runs first and refuses to patch a moto whose
internals no longer match these assumptions.
"""

from __future__ import annotations

import base64
import functools
import inspect
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .canary import check_moto_compat
from .executor import FunctionSpec, InvocationResult, ProcessExecutor

log = logging.getLogger("lambda_emulator")

REQUEST_ID = "x-amzn-requestid"  # the header boto3 reads as ResponseMetadata.RequestId
ACCOUNT_SETTINGS_PATH = r"{0}/(?P<api_version>[^/]+)/account-settings/?$"


def _too_many_requests() -> Exception:
    from moto.core.exceptions import JsonRESTError

    class TooManyRequestsException(JsonRESTError):
        code = 429

    return TooManyRequestsException("TooManyRequestsException", "Rate Exceeded.")


def _hget(headers: Any, name: str, default: str | None = None) -> str | None:
    if headers is None:
        return default
    v = headers.get(name)
    if v is None:
        v = headers.get(name.lower())
    return default if v is None else v


class LambdaExecController:
    """Owns the executor, the workers of asynchronous (Event) invocations, and the installed patches."""

    def __init__(self, executor: ProcessExecutor, concurrency_limit: int = 1000,
                 retry_delay_s: float = 1.0, save_to_cloudwatch: bool = True, role_propagation_s: float = 0.0) -> None:
        self.executor = executor
        self.role_propagation_s = role_propagation_s
        self.concurrency_limit = concurrency_limit
        self.retry_delay_s = retry_delay_s
        self.save_to_cloudwatch = save_to_cloudwatch
        self._slots = threading.BoundedSemaphore(concurrency_limit)
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._saved: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []  # one record per finished execution
        self.on_result: Callable[[dict[str, Any]], None] | None = None
        # How many times an Event invocation is delivered (AWS promises "at least once"): tests
        # return 2 for some payloads to check that a duplicate rank is refused.
        self.deliveries: Callable[[bytes], int] | None = None
        # Seconds an Event invocation waits in the queue before it starts (a cold start, throttling): tests
        # delay some ranks. As on AWS, one of $LATEST runs the code $LATEST has when it starts.
        self.start_delay: Callable[[bytes], float] | None = None
        # Whether the Invoke API refuses this request with 429 TooManyRequestsException (the account's
        # concurrency, the request rate or the scaling rule, as Lambda says it): tests throttle some ranks.
        self.throttle: Callable[[bytes], bool] | None = None

    # --------------------------------------------------------------- install
    def install(self) -> None:
        from moto.awslambda import models, responses, urls

        check_moto_compat()  # fail loudly before touching anything
        if self._saved:
            return
        ctrl = self
        self._saved["invoke"] = models.LambdaFunction.invoke

        def invoke(fn_self, body, request_headers, response_headers):  # the same signature
            return ctrl._invoke(fn_self, body, request_headers, response_headers)

        invoke.__wrapped_by_lambda_emulator__ = True  # type: ignore[attr-defined]
        models.LambdaFunction.invoke = invoke
        create = self._saved["create_function"] = models.LambdaBackend.create_function

        @functools.wraps(create)  # (the canary, run while the emulator is up, reads the original's signature)
        def create_function(backend_self, spec):
            ctrl._check_role_propagated(backend_self, spec.get("Role", ""))
            return create(backend_self, spec)

        models.LambdaBackend.create_function = create_function
        enrich = self._saved["enrich"] = inspect.getattr_static(responses.LambdaResponse, "_enrich_response")

        def enrich_response(headers, body):
            # moto stamps every answer with a random request id; an Invoke's is the invocation's own, as on AWS
            # (the id the function sees as its aws_request_id, in its START and REPORT lines)
            kept = headers.get(REQUEST_ID)
            headers, body = enrich.__func__(headers, body)
            if kept:
                headers[REQUEST_ID] = kept
            return headers, body

        responses.LambdaResponse._enrich_response = staticmethod(enrich_response)

        if not hasattr(responses.LambdaResponse, "get_account_settings"):
            def get_account_settings(resp_self):
                return 200, {}, json.dumps(ctrl.account_settings(resp_self.backend))

            responses.LambdaResponse.get_account_settings = get_account_settings
            self._saved["get_account_settings"] = True
        if ACCOUNT_SETTINGS_PATH not in urls.url_paths:
            urls.url_paths[ACCOUNT_SETTINGS_PATH] = responses.LambdaResponse.dispatch
            self._saved["url"] = True

    def uninstall(self) -> None:
        from moto.awslambda import models, responses, urls

        if "invoke" in self._saved:
            models.LambdaFunction.invoke = self._saved["invoke"]
        if "create_function" in self._saved:
            models.LambdaBackend.create_function = self._saved["create_function"]
        if "enrich" in self._saved:
            del responses.LambdaResponse._enrich_response  # (the inherited one again)
        if self._saved.get("get_account_settings"):
            del responses.LambdaResponse.get_account_settings
        if self._saved.get("url"):
            urls.url_paths.pop(ACCOUNT_SETTINGS_PATH, None)
        self._saved.clear()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no asynchronous invocation is running; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._threads, timeout)

    def close(self, join_timeout: float = 5.0) -> None:
        self.executor.close()  # SIGKILL running handlers: the workers then end quickly
        for t in list(self._threads):
            t.join(timeout=join_timeout)

    # ------------------------------------------------------------------ API
    def _check_role_propagated(self, backend, role_arn: str) -> None:
        from moto.awslambda.exceptions import InvalidParameterValueException
        from moto.core.utils import utcnow
        from moto.iam.exceptions import NotFoundException as IAMNotFoundException
        from moto.iam.models import iam_backends

        if self.role_propagation_s <= 0:
            return
        try:
            role = iam_backends[backend.account_id]["aws"].get_role_by_arn(role_arn)
        except IAMNotFoundException:  # no such role: moto's own check says so
            return
        if (utcnow() - role.create_date).total_seconds() < self.role_propagation_s:
            raise InvalidParameterValueException("The role defined for the function cannot be assumed by Lambda.")

    def account_settings(self, backend) -> dict[str, Any]:
        fns = list(backend.list_functions())
        reserved = sum(int(f.reserved_concurrency or 0) for f in fns)
        total = sum(int(getattr(f, "code_size", 0) or 0) for f in fns)
        return {
            "AccountLimit": {
                "TotalCodeSize": 80530636800,
                "CodeSizeUnzipped": 262144000,
                "CodeSizeZipped": 52428800,
                "ConcurrentExecutions": self.concurrency_limit,
                "UnreservedConcurrentExecutions": self.concurrency_limit - reserved,
            },
            "AccountUsage": {"TotalCodeSize": total, "FunctionCount": len(fns)},
        }

    @staticmethod
    def spec_from_moto(fn) -> FunctionSpec:
        from moto.awslambda.models import lambda_backends

        if getattr(fn, "package_type", "Zip") != "Zip" or not getattr(fn, "code_bytes", b""):
            raise ValueError(f"lambda emulator: only Zip functions with inline or S3 code run ({fn.function_name})")
        backend = lambda_backends[fn.account_id][fn.region]
        layers = [backend.layers_versions_by_arn(layer["Arn"]) for layer in fn.layers or ()]
        return FunctionSpec(
            layers=[(lv.code_digest, lv.code_bytes) for lv in layers if lv is not None],
            name=fn.function_name, handler=fn.handler, zip_bytes=fn.code_bytes,
            code_sha256=fn.code_digest, function_arn=fn.function_arn,
            runtime=fn.run_time or "python3.11", timeout_s=float(fn.timeout),
            architecture=(fn.architectures or ["x86_64"])[0], tmp_mb=int(fn.ephemeral_storage),
            memory_mb=int(fn.memory_size), version=str(fn.version), region=fn.region,
            env=dict(fn.environment_vars or {}),
        )

    def _invoke(self, fn, body, request_headers, response_headers):
        inv_type = _hget(request_headers, "X-Amz-Invocation-Type", "RequestResponse")
        payload = body if isinstance(body, bytes) else (body or "{}").encode()
        if not payload.strip():
            payload = b"{}"
        if self.throttle is not None and self.throttle(payload):
            raise _too_many_requests()  # moto's response layer makes it a 429 with the error type
        spec = self.spec_from_moto(fn)  # a snapshot: a later update_function_code cannot race
        response_headers["x-amz-executed-version"] = spec.version
        if inv_type == "DryRun":
            return b""
        request_id = response_headers[REQUEST_ID] = str(uuid.uuid4())
        client_ctx = _hget(request_headers, "X-Amz-Client-Context")
        if client_ctx:
            client_ctx = base64.b64decode(client_ctx).decode()
        if inv_type == "Event":
            retries = 2  # AWS's default for asynchronous invocations
            if fn.event_invoke_config:
                # moto appends on every put; the last one is the current one
                retries = int(fn.event_invoke_config[-1].config.get("MaximumRetryAttempts", 2))
            for delivery in range(self.deliveries(payload) if self.deliveries else 1):
                # (a second delivery, run at the same time, gets an id of its own: its sandbox is its own)
                rid = request_id if delivery == 0 else str(uuid.uuid4())
                t = threading.Thread(target=self._run_async, args=(fn, spec, payload, retries, client_ctx, time.time(), rid),
                                     name=f"lambda-event-{spec.name}", daemon=True)
                with self._lock:
                    self._threads.add(t)
                t.start()
            return b""  # moto's response layer makes this a 202
        with self._slots:
            res = self.executor.invoke(spec, payload, request_id=request_id, client_context=client_ctx)
        self._record(fn, spec, "RequestResponse", res, time.time())
        if res.function_error:
            response_headers["x-amz-function-error"] = res.function_error
        tail = res.logs.encode()[-4096:]
        response_headers["x-amz-log-result"] = base64.b64encode(tail).decode()
        return res.payload

    def _run_async(self, fn, spec, payload, retries, client_ctx, t_api, request_id=None) -> None:
        try:
            delay = self.start_delay(payload) if self.start_delay else 0.0
            if delay > 0:
                time.sleep(delay)
                if spec.version == "$LATEST":
                    from moto.awslambda.models import lambda_backends

                    fn = lambda_backends[fn.account_id][fn.region].get_function(fn.function_name)
                    spec = self.spec_from_moto(fn)
            for attempt in range(retries + 1):
                # The first attempt runs under the id Invoke answered (a retry gets a new one here; AWS keeps it)
                rid = request_id if attempt == 0 else None
                with self._slots:
                    res = self.executor.invoke(spec, payload, request_id=rid, client_context=client_ctx)
                self._record(fn, spec, "Event", res, t_api, attempt)
                if not res.function_error or res.error_type == "Emulator.Dropped":
                    break
                if attempt < retries:
                    time.sleep(self.retry_delay_s)
        except Exception:
            log.exception("asynchronous invocation of %s failed", spec.name)
        finally:
            with self._idle:
                self._threads.discard(threading.current_thread())
                self._idle.notify_all()

    def _record(self, fn, spec, inv_type, res: InvocationResult, t_api, attempt=0) -> None:
        rec = {"function": spec.name, "type": inv_type, "attempt": attempt,
               "request_id": res.request_id, "error": res.error_type,
               "payload": res.payload, "pid": res.pid, "t_api": t_api, "logs": res.logs, **res.timings}
        with self._lock:
            self.history.append(rec)
        if self.save_to_cloudwatch and res.error_type != "Emulator.Dropped":
            try:
                fn.logs_backend.ensure_log_group(fn.logs_group_name)  # as stock _invoke_lambda does
                fn.save_logs(res.logs)  # group /aws/lambda/<name> in moto's logs backend
            except Exception:
                log.debug("save_logs failed", exc_info=True)
        if self.on_result:
            self.on_result(rec)
