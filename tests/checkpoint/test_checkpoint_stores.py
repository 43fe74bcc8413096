"""The three places a checkpoint can live, each against the real thing (a folder, redis-server, S3 as moto serves it)."""

from __future__ import annotations

import os

import pytest
from tests_support import free_port

from fmpi.checkpoint.stores import FolderStore, open_store


@pytest.fixture(scope="module")
def s3_url():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_ACCESS_KEY_ID="testing",
                      AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    import boto3

    boto3.client("s3").create_bucket(Bucket="ckpt")
    try:
        yield "s3://ckpt/jobs/one"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(params=["folder", "redis", "s3"])
def store(request, tmp_path):
    if request.param == "folder":
        return open_store((tmp_path / "ckpt").as_uri())
    if request.param == "redis":
        url, client = request.getfixturevalue("redis_server")
        client.flushall()
        return open_store(url + "#job-7")
    return open_store(request.getfixturevalue("s3_url"))


def test_parts_go_in_and_come_back_writable(store):
    store.put("step-000000000001/rank-0", [b"head", memoryview(b"-body")])
    store.put("step-000000000001/rank-1", [b"other"])
    store.put("manifest.json", [b"{}"])
    data = store.get("step-000000000001/rank-0")
    assert data == bytearray(b"head-body")
    data[0:4] = b"HEAD"  # writable: restored arrays are views the program updates in place
    assert store.get("nothing/here") is None
    assert store.keys("step-") == ["step-000000000001/rank-0", "step-000000000001/rank-1"]
    store.delete(["step-000000000001/rank-0", "step-000000000001/rank-1"])
    assert store.keys() == ["manifest.json"]


def test_a_writer_that_dies_mid_part_leaves_no_part_in_a_folder(tmp_path):
    store = FolderStore("", str(tmp_path))

    def parts():
        yield b"half of it"
        raise KeyboardInterrupt  # (as a signal would, mid-write)

    with pytest.raises(KeyboardInterrupt):
        store.put("step-000000000002/rank-0", parts())
    assert store.keys() == [] and os.listdir(tmp_path / "step-000000000002") == []


@pytest.mark.parametrize("url", ["ftp://host/x", "s3:///no-bucket", "gopher://"])
def test_unknown_places_are_one_clear_error(url):
    with pytest.raises(ValueError, match="FMPI_CHECKPOINT_URL"):
        open_store(url)
