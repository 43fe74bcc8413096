"""What fmpirun creates in an AWS account, marked so it can be found again, kept cheap, and removed.

Created by fmpirun and tagged ``fmpi:created-by=fmpirun``:

* the rank function (with its published versions and aliases, ``deploy``);
* its log group ``/aws/lambda/NAME``, made before the function so that it
  gets a retention (``--log-retention``, default 14 days): the group Lambda
  makes on its own keeps logs forever;
* the bucket for packages over 50 MB (``s3code``), with a lifecycle rule
  that expires ``fmpi/lambda/`` objects after a week (Lambda copies the code
  when it deploys, so nothing needs them longer).

``fmpirun --backend lambda --cleanup`` removes, in the current region, the
functions and log groups carrying the tag, and fmpi's bucket (``--dry-run``
only lists them). Nothing untagged is ever touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...lambda_runtime.aws_errors import explain
from .aws import LambdaError, Target, error_code

TAG_KEY = "fmpi:created-by"
CREATED_BY_TAGS = {TAG_KEY: "fmpirun"}
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
CODE_EXPIRY_DAYS = 7
CODE_PREFIX = "fmpi/lambda/"


def prepare_log_group(target: Target, function: str, retention_days: int, log: Callable[[str], None]) -> None:
    """Create the function's log group, tagged and with a retention, unless it exists (then it is left alone)."""
    logs = target.client("logs")
    group = f"/aws/lambda/{function}"
    try:
        logs.create_log_group(logGroupName=group, tags=dict(CREATED_BY_TAGS))
    except Exception as exc:
        if error_code(exc) == "ResourceAlreadyExistsException":
            return
        log(f"warning: {explain(exc, f'create the log group {group}')}: Lambda will create it, without a retention")
        return
    try:
        logs.put_retention_policy(logGroupName=group, retentionInDays=retention_days)
    except Exception as exc:  # noqa: BLE001 - the group works without one
        log(f"warning: {explain(exc, f'set a retention of {retention_days} days on {group}')}")


def prepare_bucket(s3: Any, bucket: str, log: Callable[[str], None]) -> None:
    """Tag fmpi's new code bucket and let S3 expire the packages in it after a week."""
    try:
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in CREATED_BY_TAGS.items()]})
        s3.put_bucket_lifecycle_configuration(
            Bucket=bucket,
            LifecycleConfiguration={"Rules": [{
                "ID": "fmpi-expire-code", "Status": "Enabled", "Filter": {"Prefix": CODE_PREFIX},
                "Expiration": {"Days": CODE_EXPIRY_DAYS},
            }]},
        )
    except Exception as exc:  # noqa: BLE001 - the bucket works without them; cleanup then misses it
        log(f"warning: {explain(exc, f'tag s3://{bucket} and set its lifecycle rule')}")


@dataclass
class Found:
    kind: str  # "function" | "log group" | "bucket"
    name: str


def find_created(target: Target, bucket: str | None) -> list[Found]:
    """Everything in `target`'s region that carries fmpi's tag (and fmpi's code bucket `bucket`, if tagged)."""
    found: list[Found] = []
    lam, logs = target.client("lambda"), target.client("logs")
    try:
        for page in lam.get_paginator("list_functions").paginate():
            for fn in page["Functions"]:
                if lam.list_tags(Resource=fn["FunctionArn"]).get("Tags", {}).get(TAG_KEY):
                    found.append(Found("function", fn["FunctionName"]))
        for page in logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix="/aws/lambda/"):
            for group in page["logGroups"]:
                if _log_group_tags(logs, group).get(TAG_KEY):
                    found.append(Found("log group", group["logGroupName"]))
    except Exception as exc:
        raise LambdaError(explain(exc, "list what fmpirun created")) from None
    if bucket is not None and _bucket_is_ours(target.client("s3"), bucket):
        found.append(Found("bucket", bucket))
    return found


def remove(target: Target, item: Found) -> None:
    try:
        if item.kind == "function":
            target.client("lambda").delete_function(FunctionName=item.name)  # its versions and aliases too
        elif item.kind == "log group":
            target.client("logs").delete_log_group(logGroupName=item.name)
        else:
            _empty_and_delete(target.client("s3"), item.name)
    except Exception as exc:
        if error_code(exc) not in ("ResourceNotFoundException", "NoSuchBucket"):  # gone already
            raise LambdaError(explain(exc, f"delete the {item.kind} {item.name}")) from None


def _log_group_tags(logs: Any, group: dict[str, Any]) -> dict[str, str]:
    arn = group.get("arn", "").removesuffix(":*")
    try:
        return logs.list_tags_for_resource(resourceArn=arn).get("tags", {})
    except Exception:  # noqa: BLE001 - an endpoint without ListTagsForResource: the older call
        return logs.list_tags_log_group(logGroupName=group["logGroupName"]).get("tags", {})


def _bucket_is_ours(s3: Any, bucket: str) -> bool:
    try:
        tags = s3.get_bucket_tagging(Bucket=bucket).get("TagSet", [])
    except Exception as exc:
        if error_code(exc) in ("NoSuchBucket", "NoSuchTagSet", "404"):
            return False
        raise LambdaError(explain(exc, f"read the tags of s3://{bucket}")) from None
    return any(t.get("Key") == TAG_KEY for t in tags)


def _empty_and_delete(s3: Any, bucket: str) -> None:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    s3.delete_bucket(Bucket=bucket)
