"""Where the function's code comes from: the zip itself, or, above Lambda's direct-upload limit, an S3 object.

Lambda accepts a zip of at most 50 MB in the CreateFunction /
UpdateFunctionCode call itself; a larger one must be uploaded to S3 first
and named by bucket and key. ``CodeSource`` decides which, and uploads at
most once per content:

* the bucket is ``--s3-bucket NAME``, or fmpi's own ``fmpi-code-ACCOUNT-REGION``
  (created on first use, in the function's region, which Lambda requires;
  tagged, with a lifecycle rule that expires old packages: ``resources``);
* the key is ``fmpi/lambda/<sha256 of the zip>.zip``, so an object that is
  already there is the same code and is not uploaded again;
* the upload carries the zip's SHA-256, which S3 checks.

Permissions (docs/lambda.md): ``s3:PutObject`` and ``s3:GetObject`` on the
objects (Lambda reads the object with the caller's rights), ``s3:CreateBucket``
for fmpi's own bucket, and optionally ``s3:ListBucket`` (without it S3
answers "403" rather than "404" for an object that is not there yet, and
fmpirun simply uploads it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...lambda_runtime.aws_errors import explain
from .aws import LambdaError, Target
from .packaging import Bundle, direct_upload_limit
from .resources import prepare_bucket

KEY_PREFIX = "fmpi/lambda/"
BUCKET_PREFIX = "fmpi-code-"
NEW_BUCKET_RETRIES = 5  # a bucket just created may take a moment to accept objects
_MISSING = ("404", "NoSuchKey", "NotFound")


def default_bucket(account: str, region: str) -> str:
    """fmpi's bucket for the code of one account in one region (Lambda reads code from its own region only)."""
    return f"{BUCKET_PREFIX}{account}-{region}"


def object_key(bundle: Bundle) -> str:
    return f"{KEY_PREFIX}{bundle.sha256_hex}.zip"


class CodeSource:
    """The ``Code`` of CreateFunction and the code arguments of UpdateFunctionCode for one bundle.

    ``args()`` is called only when the function's code must change; the
    upload, when one is needed, happens then, once.
    """

    def __init__(
        self,
        target: Target,
        bundle: Bundle,
        bucket: str | None = None,
        *,
        direct_limit: int | None = None,
        log: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.target = target
        self.bundle = bundle
        self.bucket = bucket
        self.limit = direct_upload_limit() if direct_limit is None else direct_limit
        self.log = log
        self.uploaded: bool | None = None  # after args(): whether this run uploaded the object
        self._args: dict[str, Any] | None = None

    @property
    def via_s3(self) -> bool:
        return self.bundle.zipped_size > self.limit

    def describe(self) -> str:
        size = f"{_size(self.bundle.zipped_size)} zip"
        return f"{size} through S3" if self.via_s3 else size

    def args(self) -> dict[str, Any]:
        """``{"ZipFile": ...}`` or ``{"S3Bucket": ..., "S3Key": ...}`` (the same names in both API calls)."""
        if self._args is None:
            if self.via_s3:
                bucket, key = self._stage()
                self._args = {"S3Bucket": bucket, "S3Key": key}
            else:
                self._args = {"ZipFile": self.bundle.read()}
        return self._args

    # ------------------------------------------------------------------ S3
    def _stage(self) -> tuple[str, str]:
        s3 = self.target.client("s3", read_timeout=300.0)
        own = self.bucket is None
        bucket = self.bucket or default_bucket(self._account(), self.target.region)
        key = object_key(self.bundle)
        where = f"s3://{bucket}/{key}"
        if self._exists(s3, bucket, key):
            self.log(f"the code is already in {where}: not uploaded again")
            self.uploaded = False
            return bucket, key
        self.log(
            f"the zip is {_size(self.bundle.zipped_size)}, over the {_size(self.limit)} Lambda accepts "
            f"in the API call: uploading it to {where}"
        )
        for attempt in range(NEW_BUCKET_RETRIES + 1):
            try:
                self._put(s3, bucket, key)
                break
            except _NoSuchBucket:
                if not own:
                    raise LambdaError(
                        f"the S3 bucket {bucket!r} (--s3-bucket) does not exist: create it in {self.target.region} "
                        "(Lambda reads code only from a bucket in the function's region), or leave --s3-bucket out "
                        f"to let fmpirun use its own bucket ({BUCKET_PREFIX}ACCOUNT-REGION)"
                    ) from None
                if attempt == 0:
                    self._create_bucket(s3, bucket)
                elif attempt == NEW_BUCKET_RETRIES:
                    raise LambdaError(f"the S3 bucket {bucket!r} was created but does not accept objects yet; try again") from None
                else:
                    time.sleep(min(0.5 * 2**attempt, 4.0))
        self.uploaded = True
        return bucket, key

    def _account(self) -> str:
        try:
            return self.target.client("sts").get_caller_identity()["Account"]
        except Exception as exc:
            raise LambdaError(
                explain(exc, "find the AWS account (to name the S3 bucket for large packages; --s3-bucket NAME avoids this)")
            ) from None

    def _exists(self, s3: Any, bucket: str, key: str) -> bool:
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except Exception as exc:
            status = _status(exc)
            if _code(exc) in _MISSING or status in (403, 404):
                # 404: no such object (or bucket); 403: not there, or no s3:ListBucket: the upload will tell.
                return False
            raise LambdaError(explain(exc, f"look for the code in s3://{bucket}/{key}")) from None
        return head.get("ContentLength") in (None, self.bundle.zipped_size)

    def _put(self, s3: Any, bucket: str, key: str) -> None:
        t0 = time.monotonic()
        try:
            with open(self.bundle.path, "rb") as body:
                s3.put_object(
                    Bucket=bucket,
                    Key=key,
                    Body=body,
                    ContentType="application/zip",
                    ChecksumSHA256=self.bundle.code_sha256,
                    Metadata={"fmpi-digest": self.bundle.digest},
                )
        except Exception as exc:
            code = _code(exc)
            if code == "NoSuchBucket":
                raise _NoSuchBucket() from None
            if code in ("AccessDenied", "AccessDeniedException", "AllAccessDisabled"):
                raise LambdaError(
                    f"cannot upload the code to s3://{bucket}/{key}: access denied. Packages over "
                    f"{_size(self.limit)} go through S3: the identity running fmpirun needs s3:PutObject "
                    f"and s3:GetObject on arn:aws:s3:::{bucket}/{KEY_PREFIX}* (docs/lambda.md), or pass "
                    "--s3-bucket NAME of a bucket it may write to"
                ) from None
            if code == "PermanentRedirect" or code == "AuthorizationHeaderMalformed":
                raise LambdaError(
                    f"cannot upload the code to s3://{bucket}/{key}: the bucket is not in {self.target.region}; "
                    "Lambda reads code only from a bucket in the function's region: pass --s3-bucket NAME of one there"
                ) from None
            raise LambdaError(explain(exc, f"upload the code to s3://{bucket}/{key}")) from None
        self.log(f"uploaded {_size(self.bundle.zipped_size)} to s3://{bucket}/{key} ({time.monotonic() - t0:.1f} s)")

    def _create_bucket(self, s3: Any, bucket: str) -> None:
        region = self.target.region
        self.log(f"creating the S3 bucket {bucket} in {region} (for packages over {_size(self.limit)})")
        request: dict[str, Any] = {"Bucket": bucket}
        if region != "us-east-1":  # us-east-1 refuses a LocationConstraint naming itself
            request["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            s3.create_bucket(**request)
            prepare_bucket(s3, bucket, self.log)
        except Exception as exc:
            code = _code(exc)
            if code == "BucketAlreadyOwnedByYou":  # another fmpirun was quicker
                return
            if code == "BucketAlreadyExists":
                raise LambdaError(
                    f"cannot create the S3 bucket {bucket!r} for large packages: the name is taken by another "
                    "account; pass --s3-bucket NAME of a bucket of yours in " + region
                ) from None
            if code in ("AccessDenied", "AccessDeniedException"):
                raise LambdaError(
                    f"cannot create the S3 bucket {bucket!r} for packages over {_size(self.limit)}: access "
                    "denied. Give the identity running fmpirun s3:CreateBucket (docs/lambda.md), or pass "
                    f"--s3-bucket NAME of an existing bucket in {region} it may write to"
                ) from None
            raise LambdaError(explain(exc, f"create the S3 bucket {bucket}")) from None


class _NoSuchBucket(Exception):
    pass


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n} bytes"


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
