"""Deploy the rank function as an immutable version per code and configuration, and check it can run N ranks at once.

Two jobs with different programs may share a function name (the default,
``fmpi-rank``). Updating ``$LATEST`` and invoking it would let the second
job's deployment run under the first job's ranks. So every deployment is a
*published version*, found again by an alias named after what it runs
(``fmpi-<hash of CodeSha256, configuration, architecture, role>``), and the
job invokes that version number: no job runs code it did not deploy.

* unchanged code and configuration: the alias names the version; nothing is touched;
* otherwise ``$LATEST`` is updated, then published with ``CodeSha256`` and
  ``RevisionId`` as preconditions: if another fmpirun changed ``$LATEST`` in
  between, Lambda refuses, and the update is made again (a few times);
* the published version is read back: its ``CodeSha256`` must be ours.

A function created now gets fmpi's tags (``cleanup`` finds it by them) and
its log group is made first, with a retention (``resources``). A role created
moments before is not yet usable by Lambda ("cannot be assumed"): creation
is retried with back-off while IAM propagates it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...lambda_runtime.aws_errors import explain
from ...lambda_runtime.handler import HANDLER
from .aws import LambdaError, Target, error_code
from .packaging import Bundle
from .resources import CREATED_BY_TAGS, prepare_log_group
from .s3code import CodeSource

MAX_TIMEOUT = 900  # seconds: Lambda's limit for one invocation
MIN_EVENT_AGE, MAX_EVENT_AGE = 60, 21600  # seconds: MaximumEventAgeInSeconds bounds
PUBLISH_ATTEMPTS = 5  # another fmpirun may update the function between our update and our publish
ROLE_PROPAGATION = (1, 2, 4, 8, 8, 8, 8)  # seconds between CreateFunction attempts while a new role propagates
ROLE_IS_NEW = 300.0  # seconds: a role younger than this may not have reached Lambda yet
ROLE_NOT_ASSUMABLE = "cannot be assumed by lambda"


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
    log_retention: int = 14  # days, for a log group fmpirun creates

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
    version: str  # the published version every invocation of the job names
    action: str  # "created" | "updated code" | "updated configuration" | "unchanged"
    seconds: float


def deploy(
    target: Target, lam: Any, cfg: FunctionConfig, bundle: Bundle, log: Callable[[str], None], code: CodeSource | None = None,
    warn: Callable[[str], None] | None = None,
) -> Deployment:
    """Make sure a published version runs `bundle` with `cfg`; returns it. `code` says how the code travels
    (the zip in the call, or an S3 object); it is asked only when the code must change. `log` hears each
    step, `warn` (default: `log`) what the user must see: a wait for IAM."""
    t0 = time.monotonic()
    code = code or CodeSource(target, bundle, log=log)
    for _attempt in range(PUBLISH_ATTEMPTS):
        current = _get_function(lam, cfg.name)
        if current is None:
            role = _resolve_role(target, cfg.role)
            if role is None:
                raise LambdaError(
                    f"function {cfg.name!r} does not exist in {target.where} and no --role was given: "
                    "create an execution role for the ranks (docs/lambda.md) and pass --role ARN_OR_NAME"
                )
            prepare_log_group(target, cfg.name, cfg.log_retention, log)
            _create(target, lam, cfg, role, code, log, warn or log)
            changes = ["created"]
        else:
            conf = current["Configuration"]
            role = _resolve_role(target, cfg.role) if cfg.role is not None else conf.get("Role")
            version = _aliased_version(lam, cfg.name, alias_name(cfg, bundle, role), bundle)
            if version is not None:
                _no_retries(lam, cfg, version)
                return Deployment(f"{conf['FunctionArn']}:{version}", version, "unchanged", time.monotonic() - t0)
            changes = _update(lam, cfg, bundle, conf, role, code, log)
        published = _publish(lam, cfg, bundle)
        if published is None:
            log(f"function {cfg.name} was changed by someone else while we deployed it; deploying again")
            continue
        version, arn = published
        _name_version(lam, cfg.name, alias_name(cfg, bundle, role), version)
        _no_retries(lam, cfg, version)
        _no_retries(lam, cfg, None)  # $LATEST too: whoever invokes the function unqualified gets no retries either
        action = changes[0] if changes == ["created"] else ("updated " + " and ".join(changes) if changes else "published")
        return Deployment(arn, version, action, time.monotonic() - t0)
    raise LambdaError(
        f"function {cfg.name} keeps being changed by another deployment (tried {PUBLISH_ATTEMPTS} times): "
        "give this program its own --function-name"
    )


def alias_name(cfg: FunctionConfig, bundle: Bundle, role: str | None) -> str:
    """The alias of the version that runs `bundle` with `cfg` (and `role`): the same inputs, the same name."""
    wanted = {**cfg.settings(), "CodeSha256": bundle.code_sha256, "Architecture": cfg.architecture, "Role": role}
    return "fmpi-" + hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:24]


# ---------------------------------------------------------------- creating


def _create(target: Target, lam: Any, cfg: FunctionConfig, role: str, code: CodeSource, log: Callable[[str], None],
            warn: Callable[[str], None]) -> None:
    log(f"creating function {cfg.name} ({code.describe()})")
    location = code.args()
    request = dict(
        FunctionName=cfg.name, Role=role, Code=location, Architectures=[cfg.architecture],
        Description="fmpi rank (created by fmpirun)", Tags=dict(CREATED_BY_TAGS), **cfg.settings(),
    )
    waits = list(ROLE_PROPAGATION)
    while True:
        try:
            lam.create_function(**request)
            break
        except Exception as exc:
            message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", ""))
            if ROLE_NOT_ASSUMABLE in message.lower() and waits and _role_is_new(target, role):
                pause = waits.pop(0)
                warn(f"the role {role} was created moments ago and IAM is still propagating it to Lambda; "
                     f"creating the function again in {pause} s")
                time.sleep(pause)
                continue
            raise LambdaError(_explain_code(exc, f"create function {cfg.name}", location)) from None
    _wait(lam, "function_active_v2", cfg.name)


def _role_is_new(target: Target, role_arn: str) -> bool:
    """Whether the role exists and was created within ROLE_IS_NEW seconds (then "cannot be assumed" is propagation)."""
    try:
        created = target.client("iam").get_role(RoleName=role_arn.rsplit("/", 1)[-1])["Role"]["CreateDate"]
    except Exception:  # noqa: BLE001 - no such role, or no iam:GetRole: not a propagation delay we can tell
        return False
    return time.time() - created.timestamp() < ROLE_IS_NEW


# ---------------------------------------------------------------- updating


def _update(lam: Any, cfg: FunctionConfig, bundle: Bundle, conf: dict, role: str | None, code: CodeSource,
            log: Callable[[str], None]) -> list[str]:
    """Bring ``$LATEST`` to `bundle` and `cfg`; returns what changed ("code", "configuration")."""
    changes = []
    if conf.get("LastUpdateStatus") == "InProgress":
        _wait(lam, "function_updated_v2", cfg.name)
    if conf.get("CodeSha256") != bundle.code_sha256 or conf.get("Architectures", [cfg.architecture]) != [cfg.architecture]:
        log(f"updating the code of {cfg.name} ({code.describe()})")
        location = code.args()
        try:
            lam.update_function_code(FunctionName=cfg.name, Architectures=[cfg.architecture], **location)
        except Exception as exc:
            raise LambdaError(_explain_code(exc, f"update the code of {cfg.name}", location)) from None
        _wait(lam, "function_updated_v2", cfg.name)
        changes.append("code")
    deployed = {
        "Runtime": conf.get("Runtime"), "Handler": conf.get("Handler"), "MemorySize": conf.get("MemorySize"),
        "Timeout": conf.get("Timeout"), "Layers": [layer["Arn"] for layer in conf.get("Layers", [])],
    }
    update = {k: v for k, v in cfg.settings().items() if deployed.get(k) != v}
    if role is not None and role != conf.get("Role"):
        update["Role"] = role
    if update:
        log(f"updating the configuration of {cfg.name}: {', '.join(sorted(update))}")
        try:
            lam.update_function_configuration(FunctionName=cfg.name, **update)
        except Exception as exc:
            raise LambdaError(explain(exc, f"update the configuration of {cfg.name}")) from None
        _wait(lam, "function_updated_v2", cfg.name)
        changes.append("configuration")
    return changes


def _publish(lam: Any, cfg: FunctionConfig, bundle: Bundle) -> tuple[str, str] | None:
    """Publish ``$LATEST`` if it still runs `bundle`: (version, its ARN), or None if someone changed it meanwhile."""
    try:
        latest = lam.get_function_configuration(FunctionName=cfg.name)
        if latest.get("CodeSha256") != bundle.code_sha256:
            return None
        revision = {"RevisionId": latest["RevisionId"]} if latest.get("RevisionId") else {}  # (moto has none)
        published = lam.publish_version(
            FunctionName=cfg.name, CodeSha256=bundle.code_sha256, Description=f"fmpi {bundle.sha256_hex[:16]}", **revision
        )
    except Exception as exc:
        if error_code(exc) in ("PreconditionFailedException", "ResourceConflictException"):
            return None
        raise LambdaError(explain(exc, f"publish a version of {cfg.name}")) from None
    if published.get("CodeSha256") != bundle.code_sha256:
        return None
    _wait(lam, "published_version_active", cfg.name, published["Version"])
    return published["Version"], published["FunctionArn"]


def _aliased_version(lam: Any, name: str, alias: str, bundle: Bundle) -> str | None:
    """The version an earlier deployment of the same code and configuration published, if it is still there."""
    try:
        version = lam.get_alias(FunctionName=name, Name=alias)["FunctionVersion"]
        conf = lam.get_function_configuration(FunctionName=name, Qualifier=version)
    except Exception as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise LambdaError(explain(exc, f"look up the versions of {name}")) from None
    return version if conf.get("CodeSha256") == bundle.code_sha256 else None


def _name_version(lam: Any, name: str, alias: str, version: str) -> None:
    try:
        lam.create_alias(FunctionName=name, Name=alias, FunctionVersion=version, Description="fmpi: code and configuration")
    except Exception as exc:
        if error_code(exc) == "ResourceConflictException":  # a concurrent fmpirun published the same thing
            lam.update_alias(FunctionName=name, Name=alias, FunctionVersion=version)
            return
        raise LambdaError(explain(exc, f"name version {version} of {name}")) from None


def _no_retries(lam: Any, cfg: FunctionConfig, version: str | None) -> None:
    """Asynchronous retries off for `version` (an event invoke configuration is per qualifier; None: $LATEST)."""
    qualifier = {"Qualifier": version} if version else {}
    try:
        # Ranks are never retried: a retried rank would arrive after its job
        # has moved on (and be refused at the relay anyway).
        lam.put_function_event_invoke_config(
            FunctionName=cfg.name, MaximumRetryAttempts=0, MaximumEventAgeInSeconds=cfg.max_event_age, **qualifier
        )
    except Exception as exc:
        raise LambdaError(explain(exc, f"turn off retries of {cfg.name}{':' + version if version else ''}")) from None


# ------------------------------------------------------------------ checks


def check_concurrency(lam: Any, target: Target, name: str, n: int, warn: Callable[[str], None]) -> int | None:
    """Fail early when N ranks cannot all run at once; returns the limit found (None: unknown)."""
    try:
        limits = lam.get_account_settings()["AccountLimit"]
    except Exception as exc:
        warn(f"could not check the concurrency limit: {explain(exc, 'read the account settings')} "
             "(lambda:GetAccountSettings must be allowed on Resource \"*\")")
        return None
    available = limits.get("UnreservedConcurrentExecutions", limits.get("ConcurrentExecutions"))
    source = f"the account's unreserved concurrency in {target.region} is {available} (account limit {limits.get('ConcurrentExecutions')})"
    try:
        reserved = lam.get_function_concurrency(FunctionName=name).get("ReservedConcurrentExecutions")
    except Exception:  # noqa: BLE001 - not essential (no such function yet): fall back to the account's numbers
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


def function_exists(lam: Any, name: str) -> bool:
    return _get_function(lam, name) is not None


def resolve_role(target: Target, role: str | None) -> str | None:
    """The role's ARN (looked up when given by name); a clear error when it does not exist."""
    return _resolve_role(target, role)


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
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise LambdaError(explain(exc, f"look up function {name}")) from None


def _resolve_role(target: Target, role: str | None) -> str | None:
    if role is None or role.startswith("arn:"):
        return role
    iam = target.client("iam")
    try:
        return iam.get_role(RoleName=role)["Role"]["Arn"]
    except Exception as exc:
        if error_code(exc) == "NoSuchEntity":
            raise LambdaError(
                f"the execution role {role!r} does not exist in this account: create it (docs/lambda.md) or pass its ARN with --role"
            ) from None
        raise LambdaError(explain(exc, f"look up the IAM role {role}")) from None


def _wait(lam: Any, waiter: str, name: str, qualifier: str | None = None) -> None:
    from botocore.exceptions import WaiterError

    where = {"FunctionName": name, **({"Qualifier": qualifier} if qualifier else {})}
    try:
        lam.get_waiter(waiter).wait(**where, WaiterConfig={"Delay": 1, "MaxAttempts": 300})
    except WaiterError as exc:
        reason = ""
        try:
            conf = lam.get_function_configuration(**where)
            reason = conf.get("StateReason") or conf.get("LastUpdateStatusReason") or ""
        except Exception:  # noqa: BLE001
            pass
        raise LambdaError(f"function {name} did not become ready: {reason or exc}") from None
