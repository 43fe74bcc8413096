"""Create or update the rank function, wait until it is active, and check it can run N ranks at once."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...lambda_runtime.aws_errors import explain
from ...lambda_runtime.event import EVENT_VERSION
from ...lambda_runtime.handler import HANDLER
from .aws import LambdaError, Target
from .packaging import Bundle
from .s3code import CodeSource

MAX_TIMEOUT = 900  # seconds: Lambda's limit for one invocation
MIN_EVENT_AGE, MAX_EVENT_AGE = 60, 21600  # seconds: MaximumEventAgeInSeconds bounds


@dataclass
class FunctionConfig:
    name: str
    memory: int  # MB; 1769 MB is one full vCPU
    timeout: int  # seconds
    runtime: str
    architecture: str
    role: str | None = None  # ARN or role name; None: keep the existing function's role
    layers: list[str] = field(default_factory=list)
    max_event_age: int = MIN_EVENT_AGE  # an undelivered rank event older than this is dropped

    def settings(self) -> dict[str, Any]:
        """The configuration fields fmpirun manages (compared against the deployed function)."""
        return {
            "Runtime": self.runtime,
            "Handler": HANDLER,
            "MemorySize": self.memory,
            "Timeout": self.timeout,
            "Layers": list(self.layers),
        }


@dataclass
class Deployment:
    arn: str
    action: str  # "created" | "updated code" | "updated configuration" | "unchanged"
    seconds: float


def deploy(
    target: Target, lam: Any, cfg: FunctionConfig, bundle: Bundle, log: Callable[[str], None], code: CodeSource | None = None
) -> Deployment:
    """Create or update the function. `code` says how its code travels (the zip in the call, or an S3
    object for a zip over the direct-upload limit); it is asked only when the code must change."""
    t0 = time.monotonic()
    if code is None:
        code = CodeSource(target, bundle, log=log)
    current = _get_function(lam, cfg.name)
    if current is None:
        role = _resolve_role(target, cfg.role)
        if role is None:
            raise LambdaError(
                f"function {cfg.name!r} does not exist in {target.where} and no --role was given: "
                "create an execution role for the ranks (docs/lambda.md) and pass --role ARN_OR_NAME"
            )
        log(f"creating function {cfg.name} ({code.describe()})")
        location = code.args()
        try:
            created = lam.create_function(
                FunctionName=cfg.name,
                Role=role,
                Code=location,
                Architectures=[cfg.architecture],
                Description="fmpi rank (created by fmpirun)",
                **cfg.settings(),
            )
        except Exception as exc:
            raise LambdaError(_explain_code(exc, f"create function {cfg.name}", location)) from None
        _wait(lam, "function_active_v2", cfg.name)
        arn, action = created["FunctionArn"], "created"
    else:
        conf = current["Configuration"]
        arn, changes = conf["FunctionArn"], []
        if conf.get("LastUpdateStatus") == "InProgress":
            _wait(lam, "function_updated_v2", cfg.name)
        if conf.get("CodeSha256") != bundle.code_sha256:
            log(f"updating the code of {cfg.name} ({code.describe()})")
            location = code.args()
            try:
                lam.update_function_code(FunctionName=cfg.name, Architectures=[cfg.architecture], **location)
            except Exception as exc:
                raise LambdaError(_explain_code(exc, f"update the code of {cfg.name}", location)) from None
            _wait(lam, "function_updated_v2", cfg.name)
            changes.append("code")
        wanted = cfg.settings()
        deployed = {
            "Runtime": conf.get("Runtime"),
            "Handler": conf.get("Handler"),
            "MemorySize": conf.get("MemorySize"),
            "Timeout": conf.get("Timeout"),
            "Layers": [layer["Arn"] for layer in conf.get("Layers", [])],
        }
        update = {k: v for k, v in wanted.items() if deployed.get(k) != v}
        if cfg.role is not None:
            role = _resolve_role(target, cfg.role)
            if role != conf.get("Role"):
                update["Role"] = role
        if update:
            log(f"updating the configuration of {cfg.name}: {', '.join(sorted(update))}")
            try:
                lam.update_function_configuration(FunctionName=cfg.name, **update)
            except Exception as exc:
                raise LambdaError(explain(exc, f"update the configuration of {cfg.name}")) from None
            _wait(lam, "function_updated_v2", cfg.name)
            changes.append("configuration")
        action = "updated " + " and ".join(changes) if changes else "unchanged"
    try:
        # Ranks are never retried: a retried rank would arrive after its job
        # has moved on (and be refused at the relay anyway).
        lam.put_function_event_invoke_config(
            FunctionName=cfg.name, MaximumRetryAttempts=0, MaximumEventAgeInSeconds=cfg.max_event_age
        )
    except Exception as exc:
        raise LambdaError(explain(exc, f"turn off retries of {cfg.name}")) from None
    return Deployment(arn, action, time.monotonic() - t0)


def verify(lam: Any, name: str, bundled: bool = True) -> dict[str, Any]:
    """Invoke the fresh deployment once (a "ping"): the bundle must import in Lambda's runtime."""
    try:
        reply = lam.invoke(FunctionName=name, Payload=json.dumps({"fmpi": EVENT_VERSION, "ping": True}))
    except Exception as exc:
        raise LambdaError(explain(exc, f"invoke {name}")) from None
    body = reply["Payload"].read().decode("utf-8", "replace")
    if reply.get("FunctionError"):
        try:
            err = json.loads(body)
            detail = f"{err.get('errorType')}: {err.get('errorMessage')}"
        except ValueError:
            detail = body[:500]
        raise LambdaError(f"the deployed function {name} does not start: {detail}. See its logs: aws logs tail /aws/lambda/{name}")
    answer = json.loads(body)
    if "numpy_error" in answer:
        if not bundled:
            raise LambdaError(
                f"the deployed function {name} cannot import numpy ({answer['numpy_error']}): with --no-bundle-deps, "
                "a layer must provide numpy and aws-lambda-powertools (--layers ARN)"
            )
        raise LambdaError(
            f"the deployed function {name} cannot import numpy ({answer['numpy_error']}): the bundled build does not "
            "suit the Lambda runtime; see the warning above, or provide numpy with --layers ARN --no-bundle-deps"
        )
    return answer


def check_concurrency(lam: Any, target: Target, name: str, n: int, warn: Callable[[str], None]) -> int | None:
    """Fail early when N ranks cannot all run at once; returns the limit found (None: unknown)."""
    try:
        limits = lam.get_account_settings()["AccountLimit"]
    except Exception as exc:
        warn(f"could not check the concurrency limit: {explain(exc, 'read the account settings')}")
        return None
    available = limits.get("UnreservedConcurrentExecutions", limits.get("ConcurrentExecutions"))
    source = f"the account's unreserved concurrency in {target.region} is {available} (account limit {limits.get('ConcurrentExecutions')})"
    try:
        reserved = lam.get_function_concurrency(FunctionName=name).get("ReservedConcurrentExecutions")
    except Exception:  # noqa: BLE001 - not essential: fall back to the account's numbers
        reserved = None
    if reserved is not None:
        available, source = reserved, f"function {name} has a reserved concurrency of {reserved}"
    if available is not None and n > available:
        raise LambdaError(
            f"{n} ranks cannot all run at once: {source}. All ranks of a job must run at the same time; "
            "ask for a higher 'Concurrent executions' quota (Service Quotas, AWS Lambda), "
            "free reserved concurrency, or run fewer ranks"
        )
    return available


def _explain_code(exc: BaseException, action: str, location: dict[str, Any]) -> str:
    """`explain`, plus the usual reasons why Lambda cannot read code from S3."""
    message = explain(exc, action)
    if "S3Bucket" in location and "S3 Error" in str(getattr(exc, "response", {}).get("Error", {}).get("Message", "")):
        message += (
            f" (Lambda reads s3://{location['S3Bucket']}/{location['S3Key']} with the rights of the identity running "
            "fmpirun: it needs s3:GetObject there, and the bucket must be in the function's region)"
        )
    return message


def _get_function(lam: Any, name: str) -> dict[str, Any] | None:
    try:
        return lam.get_function(FunctionName=name)
    except Exception as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        if code == "ResourceNotFoundException":
            return None
        raise LambdaError(explain(exc, f"look up function {name}")) from None


def _resolve_role(target: Target, role: str | None) -> str | None:
    if role is None or role.startswith("arn:"):
        return role
    iam = target.client("iam")
    try:
        return iam.get_role(RoleName=role)["Role"]["Arn"]
    except Exception as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        if code == "NoSuchEntity":
            raise LambdaError(
                f"the execution role {role!r} does not exist in this account: create it (docs/lambda.md) or pass its ARN with --role"
            ) from None
        raise LambdaError(explain(exc, f"look up the IAM role {role}")) from None


def _wait(lam: Any, waiter: str, name: str) -> None:
    from botocore.exceptions import WaiterError

    try:
        lam.get_waiter(waiter).wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 300})
    except WaiterError as exc:
        reason = ""
        try:
            conf = lam.get_function(FunctionName=name)["Configuration"]
            reason = conf.get("StateReason") or conf.get("LastUpdateStatusReason") or ""
        except Exception:  # noqa: BLE001
            pass
        raise LambdaError(f"function {name} did not become ready: {reason or exc}") from None
