"""fmpirun's --relay redis:// and --channel options: validation, secrets kept out of messages, and what ranks get."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tests_support import fmpirun_argv

from fmpi.lambda_runtime.event import Program, RankEvent
from fmpi.launcher.cli import build_parser
from fmpi.launcher.lambda_backend.options import RelayPlan, relay_plan
from fmpi.rank.spec import (
    RankSpec,
    SpecError,
    check_relay_url,
)
from fmpi.rendezvous.urls import display_url

TOKEN = "t" * 24


@pytest.mark.parametrize(
    "url",
    ["tcp://relay:7000", "redis://localhost:6379/0", "redis://:secret@10.0.0.5:6380/2", "rediss://:pw@cache.example:6379", "redis://host"],
)
def test_relay_urls_accepted(url):
    check_relay_url(url)
    assert RankSpec("j", 0, 2, url, TOKEN).relay == url


@pytest.mark.parametrize(
    "url,why",
    [
        ("http://relay:7000", "expected tcp://host:port (fmpi-relay) or redis://"),
        ("redis://:pw@host:6379/db", "numeric db"),
        ("redis://:pw@host:notaport/0", "invalid port"),
        ("tcp://relay", "needs a host and a port"),
    ],
)
def test_bad_relay_urls_refused_without_showing_the_password(url, why):
    with pytest.raises(ValueError, match=re.escape(why)) as info:
        check_relay_url(url)
    assert "pw" not in str(info.value)
    with pytest.raises(SpecError):
        RankSpec("j", 0, 2, url, TOKEN)


def test_display_url_hides_the_redis_password():
    assert display_url("redis://:hunter2@h:6390/3") == "redis://h:6390/3"
    assert display_url("tcp://h:7000") == "tcp://h:7000"


def test_channel_travels_in_the_environment_and_the_lambda_event():
    spec = RankSpec("j", 1, 4, "redis://:pw@h:6379/0", TOKEN, channel="relay")
    env = spec.to_env()
    assert env["FMPI_CHANNEL"] == "relay" and env["FMPI_RELAY"] == "redis://:pw@h:6379/0"
    assert RankSpec.from_env(env) == spec
    event = RankEvent(spec, Program(script="a.py"), 0.0).to_event()
    assert RankEvent.from_event(event).spec.channel == "relay"
    # No channel: the rank's own FMPI_CHANNEL (if any) must not be overwritten with an empty one.
    assert "FMPI_CHANNEL" not in RankSpec("j", 1, 4, "tcp://h:1", TOKEN).to_env()
    with pytest.raises(SpecError, match="channel"):
        RankSpec("j", 1, 4, "tcp://h:1", TOKEN, channel="carrier-pigeon")


def test_the_lambda_backend_accepts_a_redis_relay():
    args = build_parser().parse_args(["-n", "2", "--backend", "lambda", "--relay", "redis://:pw@cache:6379/0", "app.py"])
    assert relay_plan(args) == RelayPlan("redis://:pw@cache:6379/0")
    args = build_parser().parse_args(["-n", "2", "--backend", "lambda", "--relay", "redis://:pw@cache:6379/zero", "app.py"])
    with pytest.raises(ValueError):
        relay_plan(args)


def test_fmpirun_rejects_a_bad_relay_url_before_starting_ranks(tmp_path):
    script = tmp_path / "never.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = subprocess.run(fmpirun_argv("-n", "2", "--relay", "redis://:s3cret@h:1/x", sys.executable, str(script)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2  # bad input, as every usage error (issue 29: one convention)
    assert "numeric db" in done.stderr and "s3cret" not in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    "channel,kind,relay", [("relay", "relayed", None), ("direct", "direct", None), ("punch", "punched", "redis")]
)
def test_fmpirun_channel_option_reaches_the_ranks(request, tmp_path, channel, kind, relay):
    # relay "redis": the redis_server fixture is the only rendezvous service, so punching relies on the
    # endpoints Redis observed (CLIENT INFO) for every rank.
    extra = ["--relay", request.getfixturevalue("redis_server")[0]] if relay == "redis" else []
    script = tmp_path / "ring.py"
    script.write_text(
        "import os\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\n"
        "print(c.rank, os.environ.get('FMPI_CHANNEL'), c.sendrecv(c.rank, (c.rank + 1) % c.size, source=(c.rank - 1) % c.size))\n"
    )
    done = subprocess.run(fmpirun_argv("-n", "3", "-v", *extra, "--channel", channel, sys.executable, str(script)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"{r} {channel} {(r - 1) % 3}" for r in range(3)]
    assert "links: 3 (" in done.stderr and f"3 {kind}" in done.stderr, done.stderr
