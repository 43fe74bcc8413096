"""Packages over Lambda's direct-upload limit go through S3; packages over the unzipped limit are refused early.

Against the moto server of the ``moto`` fixture, with real boto3 calls: the
deployment code (``deploy`` + ``s3code.CodeSource``) in-process, and whole
jobs through ``fmpirun --backend lambda`` as a subprocess. The limits are
lowered (``FMPI_LAMBDA_ZIP_LIMIT`` / ``FMPI_LAMBDA_UNZIPPED_LIMIT``, or the
parameters) so that no test needs a 50 MB zip.
"""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from fmpi.lambda_local.server import MOTO_ACCOUNT
from lambda_testing import PROGRAMS, aws_env

from fmpi.launcher.lambda_backend import packaging
from fmpi.launcher.lambda_backend.aws import LambdaError, Target
from fmpi.launcher.lambda_backend.deploy import FunctionConfig, deploy
from fmpi.lambda_runtime.runtimes import default_architecture, default_runtime
from fmpi.launcher.lambda_backend.packaging import PackagingError, build_bundle
from fmpi.launcher.lambda_backend.s3code import (
    KEY_PREFIX,
    CodeSource,
    default_bucket,
    object_key,
)

REGION = "us-east-1"


def _name(prefix: str = "fmpi-s3-") -> str:
    return prefix + uuid.uuid4().hex[:8]


def _target(moto, region: str = REGION) -> Target:
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region)
    return Target("lambda", session, region, moto.endpoint_url)


def _cfg(moto, name: str) -> FunctionConfig:
    return FunctionConfig(name=name, memory=256, timeout=30, runtime=default_runtime().name,
                          architecture=default_architecture(), role=moto.role_arn)


def _code_dir(tmp_path: Path, text: str = "print('hello')\n") -> Path:
    code = tmp_path / ("code-" + uuid.uuid4().hex[:6])
    code.mkdir()
    (code / "main.py").write_text(text)
    return code


def _objects(s3, bucket: str) -> dict[str, dict]:
    try:
        listing = s3.list_objects_v2(Bucket=bucket, Prefix=KEY_PREFIX)
    except s3.exceptions.NoSuchBucket:
        return {}
    return {o["Key"]: o for o in listing.get("Contents", [])}


def _code_location(lam, name: str) -> tuple[str, str]:
    got = lam.get_function(FunctionName=name)
    return got["Code"]["Location"], got["Configuration"]["CodeSha256"]


# ------------------------------------------------------------- in-process deploy


def test_zip_over_the_limit_is_deployed_from_s3_once_per_content(moto, tmp_path):
    target, lam, s3 = _target(moto), moto.client("lambda"), moto.client("s3")
    bucket = _name("fmpi-test-bucket-")
    s3.create_bucket(Bucket=bucket)
    bundle = build_bundle(_code_dir(tmp_path), vendor=False, cache_dir=tmp_path / "cache")
    notes: list[str] = []

    first = _name()
    code = CodeSource(target, bundle, bucket, direct_limit=bundle.zipped_size - 1, log=notes.append)
    assert code.via_s3
    done = deploy(target, lam, _cfg(moto, first), bundle, notes.append, code)
    assert done.action == "created" and code.uploaded is True
    key = object_key(bundle)
    assert key == f"{KEY_PREFIX}{base64.b64decode(bundle.code_sha256).hex()}.zip"
    stored = _objects(s3, bucket)
    assert list(stored) == [key] and stored[key]["Size"] == bundle.zipped_size
    location, sha = _code_location(lam, first)
    assert location.endswith("/" + key) and sha == bundle.code_sha256  # Lambda took the S3 object's bytes
    assert any(f"uploading it to s3://{bucket}/{key}" in n for n in notes)

    # The same content again (another function): the object is there already, nothing is uploaded.
    second = _name()
    again = CodeSource(target, bundle, bucket, direct_limit=1, log=notes.append)
    assert deploy(target, lam, _cfg(moto, second), bundle, notes.append, again).action == "created"
    assert again.uploaded is False
    after = _objects(s3, bucket)
    assert list(after) == [key] and after[key]["LastModified"] == stored[key]["LastModified"]
    assert after[key]["ETag"] == stored[key]["ETag"]
    assert _code_location(lam, second)[1] == bundle.code_sha256

    # Redeploying the unchanged function does not even look at S3.
    idle = CodeSource(target, bundle, bucket, direct_limit=1)
    assert deploy(target, lam, _cfg(moto, first), bundle, notes.append, idle).action == "unchanged"
    assert idle.uploaded is None

    # Changed content: a new key, and the function's code is updated from it.
    changed = build_bundle(_code_dir(tmp_path, "print('changed')\n"), vendor=False, cache_dir=tmp_path / "cache")
    update = CodeSource(target, changed, bucket, direct_limit=1)
    assert deploy(target, lam, _cfg(moto, first), changed, notes.append, update).action == "updated code"
    assert update.uploaded is True
    assert set(_objects(s3, bucket)) == {key, object_key(changed)}
    location, sha = _code_location(lam, first)
    assert location.endswith("/" + object_key(changed)) and sha == changed.code_sha256


def test_zip_under_the_limit_is_sent_in_the_call(moto, tmp_path):
    target, lam = _target(moto), moto.client("lambda")
    bundle = build_bundle(_code_dir(tmp_path), vendor=False, cache_dir=tmp_path / "cache")
    code = CodeSource(target, bundle, "no-such-bucket-" + uuid.uuid4().hex[:8])  # never touched
    assert not code.via_s3 and code.args().keys() == {"ZipFile"}
    name = _name()
    assert deploy(target, lam, _cfg(moto, name), bundle, lambda _m: None, code).action == "created"
    assert _code_location(lam, name)[1] == bundle.code_sha256


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1"])
def test_own_bucket_is_created_per_account_and_region(moto, tmp_path, region):
    s3 = moto.client("s3")
    bucket = default_bucket(MOTO_ACCOUNT, region)
    assert bucket == f"fmpi-code-{MOTO_ACCOUNT}-{region}"
    bundle = build_bundle(_code_dir(tmp_path), vendor=False, cache_dir=tmp_path / "cache")
    code = CodeSource(_target(moto, region), bundle, direct_limit=1)
    assert code.args() == {"S3Bucket": bucket, "S3Key": object_key(bundle)}
    # us-east-1 reports no LocationConstraint; other regions need it at creation (moto refuses otherwise)
    assert (s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] or "us-east-1") == region
    assert object_key(bundle) in _objects(s3, bucket)
    # and a second run finds it (the bucket exists now, the object too)
    again = CodeSource(_target(moto, region), bundle, direct_limit=1)
    again.args()
    assert again.uploaded is False


def test_named_bucket_that_does_not_exist(moto, tmp_path):
    bundle = build_bundle(_code_dir(tmp_path), vendor=False, cache_dir=tmp_path / "cache")
    missing = "fmpi-missing-" + uuid.uuid4().hex[:8]
    with pytest.raises(LambdaError, match=rf"the S3 bucket '{missing}' \(--s3-bucket\) does not exist: create it in us-east-1"):
        CodeSource(_target(moto), bundle, missing, direct_limit=1).args()
    with pytest.raises(ClientError, match="404"):
        moto.client("s3").head_bucket(Bucket=missing)  # not created behind the user's back


class _Denying(Target):
    """A Target whose S3 calls named in `deny` get AWS's 403 AccessDenied (as a policy without them would)."""

    deny: tuple[str, ...] = ()

    def client(self, service: str, **kw):
        client = super().client(service, **kw)
        if service == "s3":
            for operation in self.deny:
                client.meta.events.register(f"before-send.s3.{operation}", self._refuse)
        return client

    @staticmethod
    def _refuse(request, **_kw):
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                b"<Message>User is not authorized to perform this action</Message></Error>")
        return AWSResponse(request.url, 403, {"Content-Type": "application/xml"}, _Raw(body))


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_kw):
        yield self.body

    def read(self, *_a, **_kw) -> bytes:
        return self.body


def _denying(moto, *operations: str, region: str = REGION) -> Target:
    plain = _target(moto, region)
    target = _Denying(plain.backend, plain.session, plain.region, plain.endpoint_url)
    target.deny = operations
    return target


def test_upload_without_permission_names_what_is_missing(moto, tmp_path):
    bucket = _name("fmpi-test-bucket-")
    moto.client("s3").create_bucket(Bucket=bucket)
    bundle = build_bundle(_code_dir(tmp_path), vendor=False, cache_dir=tmp_path / "cache")
    code = CodeSource(_denying(moto, "PutObject", "HeadObject"), bundle, bucket, direct_limit=1)
    with pytest.raises(LambdaError) as err:
        code.args()
    message = str(err.value)
    assert f"cannot upload the code to s3://{bucket}/{object_key(bundle)}: access denied" in message
    assert "s3:PutObject" in message and "s3:GetObject" in message and "--s3-bucket" in message
    assert _objects(moto.client("s3"), bucket) == {}


def test_bucket_creation_without_permission(moto, tmp_path):
    region = "ap-southeast-2"  # a region no other test uses: its bucket does not exist yet
    bundle = build_bundle(_code_dir(tmp_path), vendor=False, cache_dir=tmp_path / "cache")
    code = CodeSource(_denying(moto, "CreateBucket", region=region), bundle, direct_limit=1)
    with pytest.raises(LambdaError, match=r"cannot create the S3 bucket 'fmpi-code-\d+-ap-southeast-2' .* access denied.*s3:CreateBucket.*--s3-bucket"):
        code.args()


# --------------------------------------------------------------------- limits


def test_direct_limit_and_unzipped_limit_come_from_the_environment(monkeypatch, tmp_path):
    assert packaging.direct_upload_limit() == 50 * 2**20 and packaging.unzipped_limit() == 250 * 2**20
    monkeypatch.setenv("FMPI_LAMBDA_ZIP_LIMIT", "1000")
    monkeypatch.setenv("FMPI_LAMBDA_UNZIPPED_LIMIT", str(10**12))
    assert packaging.direct_upload_limit() == 1000
    assert packaging.unzipped_limit() == 250 * 2**20  # Lambda's own limit cannot be raised
    monkeypatch.setenv("FMPI_LAMBDA_ZIP_LIMIT", "lots")
    with pytest.raises(PackagingError, match="FMPI_LAMBDA_ZIP_LIMIT must be a number of bytes"):
        packaging.direct_upload_limit()


def test_unzipped_limit_is_checked_before_zipping(tmp_path):
    code = _code_dir(tmp_path)
    (code / "weights.bin").write_bytes(b"\0" * (2 * 2**20))
    with pytest.raises(PackagingError) as err:
        build_bundle(code, vendor=False, cache_dir=tmp_path / "cache", max_unzipped=2 * 2**20)
    message = str(err.value)
    assert "Lambda allows at most 2.0 MB unzipped (its 250 MB limit" in message
    assert "weights.bin" in message and "--layers" in message
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*.zip"))


# ------------------------------------------------------------ through fmpirun


def test_job_runs_from_code_deployed_through_s3(lambda_run, moto, bundle_cache):
    """The whole path: fmpirun uploads the zip to its own bucket, the function runs it, a rerun uploads nothing."""
    s3, lam = moto.client("s3"), moto.client("lambda")
    bucket = default_bucket(MOTO_ACCOUNT, REGION)
    before = _objects(s3, bucket)
    name = _name()
    env = aws_env(moto.endpoint_url, bundle_cache, FMPI_LAMBDA_ZIP_LIMIT="1")
    run = lambda_run(2, PROGRAMS / "hello.py", extra=("--function-name", name, "-v"), env=env)
    assert run.returncode == 0, run.stderr
    assert sorted(run.lines()) == ["hello from rank 0 of 2", "hello from rank 1 of 2"], run.stdout
    location, sha = _code_location(lam, name)
    key = f"{KEY_PREFIX}{base64.b64decode(sha).hex()}.zip"
    assert location.endswith("/" + key)
    assert f"uploading it to s3://{bucket}/{key}" in run.stderr or key in before
    stored = _objects(s3, bucket)
    assert key in stored

    # A second function with the same package: the object is reused, nothing new is stored.
    other = _name()
    run = lambda_run(2, PROGRAMS / "hello.py", extra=("--function-name", other, "-v"), env=env)
    assert run.returncode == 0, run.stderr
    assert f"the code is already in s3://{bucket}/{key}: not uploaded again" in run.stderr
    assert "uploading" not in run.stderr
    after = _objects(s3, bucket)
    assert after.keys() == stored.keys() and after[key]["LastModified"] == stored[key]["LastModified"]
    assert _code_location(lam, other)[1] == sha


def test_package_over_the_unzipped_limit_fails_early(lambda_run, moto, bundle_cache, tmp_path):
    code = _code_dir(tmp_path)
    (code / "weights.bin").write_bytes(b"\0" * (3 * 2**20))
    name = _name()
    env = aws_env(moto.endpoint_url, bundle_cache, FMPI_LAMBDA_UNZIPPED_LIMIT=str(2 * 2**20), FMPI_LAMBDA_ZIP_LIMIT="1")
    run = lambda_run(2, code / "main.py", extra=("--function-name", name, "--no-bundle-deps"), env=env)
    assert run.returncode == 1
    assert "the function is too large" in run.stderr and "Lambda allows at most 2.0 MB unzipped" in run.stderr
    assert "250 MB" in run.stderr and "--layers" in run.stderr and "weights.bin" in run.stderr
    with pytest.raises(moto.client("lambda").exceptions.ResourceNotFoundException):
        moto.client("lambda").get_function(FunctionName=name)  # nothing was deployed


def test_bad_bucket_name_is_a_usage_error(lambda_run):
    run = lambda_run(2, PROGRAMS / "hello.py", extra=("--s3-bucket", "Not_A_Bucket"))
    assert run.returncode == 2
    assert "--s3-bucket 'Not_A_Bucket' is not a valid S3 bucket name" in run.stderr


# ------------------------------------------------------------- several relays


@pytest.fixture
def two_relays():
    """Two fmpi-relay processes (as users run them), stopped after the test."""
    import subprocess
    import sys

    procs, urls = [], []
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "fmpi-relay"), "--host", "127.0.0.1", "--port", "0",
                 "--probe-port", "-1", "--log-level", "WARNING"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )
            procs.append(proc)
            line = proc.stdout.readline()
            assert line.startswith("fmpi-relay listening on tcp://"), line
            urls.append(line.split()[-1])
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def test_lambda_job_on_two_relays_hosts_objects_on_both(lambda_run, two_relays):
    """--relay tcp://a,b: the job is created on a, fmpirun hosts its shared objects on b for the job's duration."""
    import json
    import re

    relays = "tcp://" + ",".join(u[len("tcp://"):] for u in two_relays)
    run = lambda_run(4, PROGRAMS / "server_side.py", extra=("--relay", relays, "--channel", "relay", "-v"))
    assert run.returncode == 0, run.stderr
    assert sorted(re.findall(r"^OK \d$", run.stdout, re.MULTILINE)) == [f"OK {r}" for r in range(4)], run.stdout
    calls = [json.loads(m) for m in re.findall(r"^SERVER \d (.*)$", run.stdout, re.MULTILINE)]
    assert len(calls) == 4 and all(c.get("allreduce", 0) >= 18 and c.get("barrier", 0) >= 6 for c in calls), calls
    nodes = [json.loads(m) for m in re.findall(r"^NODES \d (.*)$", run.stdout, re.MULTILINE)]
    assert len(nodes) == 4 and all(len(n) == 2 for n in nodes), nodes  # every rank used both relays
    assert "shared objects hosted on 2 relays" in run.stderr


def test_objects_are_hosted_on_the_other_relays_for_the_job():
    """The hosting call itself, against two real relays: the second hosts the job (its ranks can attach); none with one relay."""
    from tests_support import RelayProcess

    from fmpi.dso_client.client import DsoClient
    from fmpi.launcher import relays as hosting

    class J:
        id, token = "jhost" + str(time.monotonic_ns()), "t" * 24

    a, b = RelayProcess(), RelayProcess()
    try:
        assert hosting.host_objects(J(), a.url) is None
        host = hosting.host_objects(J(), "tcp://{}:{},{}:{}".format(*a.address, *b.address))
        assert host is not None and list(host.conns) == [b.url]
        with DsoClient(b.url, J.id, J.token) as client:  # a rank attaches on b: the job is there
            assert client.counter("c").add(2) == 2
        host.end()
    finally:
        a.stop()
        b.stop()
