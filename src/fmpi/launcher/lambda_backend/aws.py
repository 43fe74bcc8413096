"""boto3 sessions for the two AWS backends, and AWS errors as messages that name their cause.

* ``lambda``: credentials from the usual boto3 chain (environment,
  ``--profile`` / ``AWS_PROFILE``, ``~/.aws``, instance or container roles);
  the region in the AWS CLI v2's order: ``--region``, ``AWS_REGION``,
  ``AWS_DEFAULT_REGION``, the profile's (botocore alone skips
  ``AWS_REGION``, and a profile's region would win over it);
  ``AWS_ENDPOINT_URL`` (or ``--endpoint-url``) redirects every call, which is
  how the tests point it at moto.
* ``localstack``: the same code against ``http://localhost:4566`` (or
  ``AWS_ENDPOINT_URL`` / ``--endpoint-url``) with LocalStack's test
  credentials and ``us-east-1`` unless told otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

LOCALSTACK_ENDPOINT = "http://localhost:4566"
LOCALSTACK_REGION = "us-east-1"


class LambdaError(Exception):
    """A step of a Lambda launch failed; the message names the cause and what to do about it."""


@dataclass
class Target:
    backend: str  # "lambda" | "localstack"
    session: Any  # boto3.Session
    region: str
    endpoint_url: str | None  # None: AWS itself (or AWS_ENDPOINT_URL, which boto3 reads)

    def client(self, service: str, *, workers: int = 10, read_timeout: float = 70.0, attempts: int = 9) -> Any:
        """A client with botocore's own back-off for throttling and transient errors: `attempts` calls in all
        (1: no retry)."""
        from botocore.config import Config

        config = Config(
            # ("total_max_attempts": botocore reads a plain "max_attempts" as retries, one fewer than calls)
            retries={"mode": "standard", "total_max_attempts": attempts},
            max_pool_connections=workers,
            connect_timeout=10,
            read_timeout=read_timeout,
            # An emulator (LocalStack at localhost:4566, moto) serves buckets by path, not by host name.
            s3={"addressing_style": "path"} if service == "s3" and self.custom_endpoint else None,
        )
        return self.session.client(service, endpoint_url=self.endpoint_url, config=config)

    @property
    def custom_endpoint(self) -> str | None:
        """The endpoint used instead of AWS's own (an emulator, usually), if any."""
        return self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_LAMBDA") or os.environ.get("AWS_ENDPOINT_URL")

    @property
    def where(self) -> str:
        endpoint = self.custom_endpoint
        return f"{self.region} at {endpoint}" if endpoint else self.region

    def account(self) -> str:
        """The account the credentials belong to (sts:GetCallerIdentity, allowed to every identity)."""
        from ...lambda_runtime.aws_errors import explain

        try:
            return self.client("sts").get_caller_identity()["Account"]
        except Exception as exc:
            raise LambdaError(explain(exc, "find the AWS account of these credentials")) from None


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError ("" for anything else)."""
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def region_choice(region: str | None, environ: dict[str, str] | None = None) -> tuple[str | None, str]:
    """(region, where it came from) in the AWS CLI v2's order, before the profile (None: ask the profile)."""
    environ = dict(os.environ) if environ is None else environ
    if region:
        return region, "--region"
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if environ.get(name, "").strip():
            return environ[name].strip(), name
    return None, "the AWS profile"


def connect(backend: str, region: str | None, profile: str | None, endpoint_url: str | None) -> Target:
    """A session for `backend`, with its credentials and region checked before any API call."""
    try:
        import boto3
        import botocore.exceptions
    except ImportError:
        raise LambdaError("the Lambda backends need boto3: pip install 'fmpi[aws]'") from None

    if backend == "localstack":
        endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or LOCALSTACK_ENDPOINT
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or LOCALSTACK_REGION
        session = boto3.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name=region)
    else:
        region, _source = region_choice(region)
        try:
            session = boto3.Session(profile_name=profile, region_name=region)
        except botocore.exceptions.ProfileNotFound as exc:
            name = profile or os.environ.get("AWS_PROFILE") or getattr(exc, "kwargs", {}).get("profile")
            where = "--profile" if profile else "AWS_PROFILE"
            raise LambdaError(
                f"AWS profile {name!r} ({where}) not found in ~/.aws/config or ~/.aws/credentials: "
                "`aws configure list-profiles` shows the ones there"
            ) from None
        region = session.region_name
        if not region:
            raise LambdaError(
                "no AWS region: pass --region (e.g. --region us-east-1), set AWS_REGION, or set a region in your AWS profile"
            )
        try:
            credentials = session.get_credentials()
        except botocore.exceptions.BotoCoreError as exc:
            raise LambdaError(f"cannot load AWS credentials: {exc}") from None
        if credentials is None:
            raise LambdaError(
                "no AWS credentials found (environment, --profile/AWS_PROFILE, ~/.aws/credentials, instance or "
                "container role): run `aws configure`, set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass "
                "--profile. For LocalStack use --backend localstack."
            )
    _check_region(session, region)
    _same_for_every_client(backend, region, profile, endpoint_url)
    return Target(backend, session, region, endpoint_url)


def _same_for_every_client(backend: str, region: str, profile: str | None, endpoint_url: str | None) -> None:
    """Every boto3 client this process makes later talks to the same account, region and endpoint: the
    checkpoint store (checkpoint/stores.py), which fmpirun opens to read a launch's progress and to remove
    the checkpoints of a job that ended well, knows no Target (with --endpoint-url or --profile it went to
    the default endpoint or profile, and a LocalStack job's checkpoints stayed behind)."""
    if endpoint_url:
        os.environ["AWS_ENDPOINT_URL"] = endpoint_url
    if profile:
        os.environ["AWS_PROFILE"] = profile
    os.environ["AWS_DEFAULT_REGION"] = region
    if backend == "localstack":
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")


def _check_region(session: Any, region: str) -> None:
    known: set[str] = set()
    for partition in session.get_available_partitions():
        known.update(session.get_available_regions("lambda", partition_name=partition))
    if known and region not in known:
        close = sorted(r for r in known if r.split("-")[0] == region.split("-")[0])[:6]
        hint = f" (regions like it: {', '.join(close)})" if close else ""
        raise LambdaError(f"unknown AWS region {region!r}: Lambda is not offered there{hint}; check --region / AWS_REGION")


