"""fmpirun's Lambda options and AWS configuration, at the boundary: real boto3 sessions and config files, no AWS call."""

from __future__ import annotations

import json

import pytest

from fmpi.launcher.cli import build_parser
from fmpi.launcher.lambda_backend.aws import LambdaError, connect
from tests_support import unset_for_the_test
from fmpi.launcher.lambda_backend.join_failures import parse
from fmpi.launcher.lambda_backend.options import UsageError, rank_environment, relay_plan
from fmpi.launcher.lambda_backend.preflight import check_advertised


@pytest.fixture
def aws_files(tmp_path, monkeypatch):
    """An AWS config with a profile whose region is eu-west-1, and its credentials; no other AWS_* variable."""
    config, credentials = tmp_path / "config", tmp_path / "credentials"
    config.write_text("[default]\nregion = eu-west-1\n[profile work]\nregion = eu-central-1\n")
    credentials.write_text("[default]\naws_access_key_id = AKIDEFAULT\naws_secret_access_key = s\n"
                           "[work]\naws_access_key_id = AKIWORK\naws_secret_access_key = s\n")
    unset_for_the_test(monkeypatch, "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID",
                       "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def test_region_follows_the_aws_cli_order(aws_files):
    assert connect("lambda", None, None, None).region == "eu-west-1"  # the profile's
    aws_files.setenv("AWS_DEFAULT_REGION", "us-west-1")
    assert connect("lambda", None, None, None).region == "us-west-1"
    aws_files.setenv("AWS_REGION", "us-west-2")  # wins over AWS_DEFAULT_REGION and the profile (botocore skips it)
    assert connect("lambda", None, None, None).region == "us-west-2"
    assert connect("lambda", None, "work", None).region == "us-west-2"
    assert connect("lambda", "ap-south-1", "work", None).region == "ap-south-1"  # the flag wins over all


def test_an_unknown_profile_is_named(aws_files):
    aws_files.setenv("AWS_PROFILE", "nosuch")
    with pytest.raises(LambdaError, match=r"AWS profile 'nosuch' \(AWS_PROFILE\) not found"):
        connect("lambda", None, None, None)
    with pytest.raises(LambdaError, match=r"AWS profile 'other' \(--profile\) not found"):
        connect("lambda", None, "other", None)


def _args(*argv: str):
    return build_parser().parse_args(["--backend", "lambda", "-n", "2", *argv, "python", "app.py"])


def test_relay_listen_and_advertise():
    plan = relay_plan(_args("--relay-listen", "0.0.0.0:7000", "--relay-advertise", "203.0.113.7"))
    assert plan.listen == ("0.0.0.0", 7000) and plan.url_for(("0.0.0.0", 7000)) == "tcp://203.0.113.7:7000"
    plan = relay_plan(_args("--relay-listen", "0.0.0.0:0", "--relay-advertise", "relay.example.com:7443"))
    assert plan.url_for(("0.0.0.0", 40000)) == "tcp://relay.example.com:7443"
    plan = relay_plan(_args("--relay-listen", "198.51.100.2:7000", "--relay-probe-port", "7001"))
    assert plan.url_for(("198.51.100.2", 7000)) == "tcp://198.51.100.2:7000" and plan.probe_port == 7001
    with pytest.raises(UsageError, match="--relay-advertise"):
        relay_plan(_args("--relay-listen", "0.0.0.0:7000"))
    with pytest.raises(UsageError, match="for the relay fmpirun runs itself"):
        relay_plan(_args("--relay", "tcp://h:7000", "--relay-advertise", "1.2.3.4"))


@pytest.mark.parametrize("url, words", [
    ("tcp://127.0.0.1:7000", "loopback"),
    ("tcp://10.0.3.4:7000", "private address"),
    ("tcp://192.168.1.5:7000,52.95.110.1:7000", "private address"),
    ("redis://:pw@172.16.0.9:6379/0", "private address"),
])
def test_an_address_lambda_cannot_reach_is_refused_before_deploying(url, words):
    with pytest.raises(LambdaError, match=words):
        check_advertised(url, real_aws=True)
    check_advertised(url, real_aws=False)  # an emulator on this machine reaches it


def test_public_addresses_and_names_pass():
    check_advertised("tcp://52.95.110.1:7000", real_aws=True)
    check_advertised("tls://relay.example.com:7000", real_aws=True)


def test_rank_environment_takes_fmpi_variables_and_the_options():
    here = {"FMPI_CHANNEL": "relay", "FMPI_COLL_SEGMENT": "64K", "FMPI_CACHE_DIR": "/home/me/.cache",
            "FMPI_TLS_CA": "/home/me/ca.pem", "FMPI_JOB": "j1", "SECRET": "s", "HOME": "/home/me"}
    env = rank_environment(["SECRET", "EXTRA=1"], here)
    assert env == {"FMPI_CHANNEL": "relay", "FMPI_COLL_SEGMENT": "64K", "SECRET": "s", "EXTRA": "1"}


def test_join_failure_lines_of_this_job_only():
    line = json.dumps({"level": "ERROR", "message": "fmpi_join_failed: rank 3 of job j42 could not join: "
                                                    "cannot reach the relay at tcp://h:1: refused", "job": "j42"})
    assert parse(line, "j42") == (3, "cannot reach the relay at tcp://h:1: refused")
    assert parse(line, "j43") is None
    assert parse("START RequestId: 1", "j42") is None
