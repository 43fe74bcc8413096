"""Where Lambda ranks keep their checkpoints by default: a prefix in fmpi's own S3 bucket of the account and region."""

from __future__ import annotations

import argparse
import uuid

from ...lambda_runtime.aws_errors import explain
from ..job import log
from .aws import LambdaError, connect
from .resources import prepare_bucket
from .s3code import default_bucket


def default_checkpoint_url(args: argparse.Namespace) -> str:
    """``s3://BUCKET/checkpoints/ID`` in --s3-bucket or fmpi's bucket, which is created when missing."""
    try:
        return _in_bucket(args)
    except LambdaError as exc:
        raise ValueError(str(exc)) from None  # (fmpirun: error: ..., status 1)


def _in_bucket(args: argparse.Namespace) -> str:
    target = connect(args.backend, args.region, args.profile, args.endpoint_url)
    bucket = args.s3_bucket or default_bucket(target.account(), target.region)
    s3 = target.client("s3")
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001 - missing (or not ours to see): creating it says which
        request: dict = {"Bucket": bucket}
        if target.region != "us-east-1":  # us-east-1 refuses a LocationConstraint naming itself
            request["CreateBucketConfiguration"] = {"LocationConstraint": target.region}
        try:
            s3.create_bucket(**request)
        except Exception as exc:  # noqa: BLE001 - explain() names the cause
            raise LambdaError(explain(exc, f"create the S3 bucket {bucket} for checkpoints (or pass --checkpoint-url)")) from None
        prepare_bucket(s3, bucket, log)
    return f"s3://{bucket}/checkpoints/{uuid.uuid4().hex[:12]}"
