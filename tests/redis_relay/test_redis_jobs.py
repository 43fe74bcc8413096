"""Whole fmpirun jobs with Redis as the relay (``--relay redis://``), against the same jobs on fmpi-relay.

Every job runs on the real redis-server of the module fixture. After each
one, the server must hold no fmpi key at all, and the relayed jobs must
really have moved their frames through it (the mailbox script's call count
grows), so a job that quietly used another path cannot pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests_support import fmpirun_argv

TESTS = Path(__file__).resolve().parents[1]
P2P = TESTS / "p2p" / "p2p_semantics.py"
COLL = TESTS / "collectives" / "programs" / "diff_uppercase.py"
COLL_LOWER = TESTS / "collectives" / "programs" / "diff_lowercase.py"

_reference: dict[tuple[str, int], list[str]] = {}  # (program, n) -> result lines under the tcp relay


def fmpirun(n: int, program: Path, *args: str, relay: str | None = None, channel: str | None = None, timeout: float = 180):
    extra = [*(["--relay", relay] if relay else []), *(["--channel", channel] if channel else [])]
    return subprocess.run(
        fmpirun_argv("-n", str(n), "--tag-output", *extra, sys.executable, str(program), *args),
        capture_output=True, text=True, timeout=timeout,
    )


def results(directory: Path) -> list[str]:
    return sorted(line for f in directory.glob("rank*.txt") for line in f.read_text().splitlines())


def fmpi_keys(client) -> list[bytes]:
    return list(client.scan_iter(match="fmpi:*", count=1000))


def script_calls(client) -> int:
    """EVAL/EVALSHA calls so far: the mailbox pushes are scripts."""
    stats = client.info("commandstats")
    return sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_evalsha", "cmdstat_eval"))


def run_program(program: Path, n: int, tmp_path: Path, label: str, *, relay=None, channel=None, nbytes=None) -> list[str]:
    out = tmp_path / label
    out.mkdir()
    args = ([nbytes] if nbytes else []) + [str(out)]
    done = fmpirun(n, program, *args, relay=relay, channel=channel)
    assert done.returncode == 0, f"{label}: exit {done.returncode}\n{done.stderr[-4000:]}"
    lines = results(out)
    assert len(lines) >= 5 * n, f"{label}: only {len(lines)} result lines"
    return lines


def reference(program: Path, n: int, tmp_path: Path, nbytes=None) -> list[str]:
    key = (program.name, n)
    if key not in _reference:
        _reference[key] = run_program(program, n, tmp_path, "tcp", channel="relay", nbytes=nbytes)
    return _reference[key]


@pytest.mark.parametrize("channel", ["relay", "auto"])
@pytest.mark.parametrize("n", [2, 4])
def test_p2p_over_redis_matches_the_tcp_relay(redis_server, tmp_path, n, channel):
    url, client = redis_server
    nbytes = str(3 << 20)  # 3 MiB: a dozen 256 KiB chunks per message, order must hold
    before = script_calls(client)
    ours = run_program(P2P, n, tmp_path, "redis", relay=url, channel=channel, nbytes=nbytes)
    assert ours == reference(P2P, n, tmp_path, nbytes)
    assert sum(" large " in line for line in ours) == 2
    pushed = script_calls(client) - before
    if channel == "relay":
        assert pushed > 4 * n, f"only {pushed} script calls: the frames did not go through Redis"
    assert fmpi_keys(client) == []


@pytest.mark.parametrize("channel", ["relay", "auto"])
@pytest.mark.parametrize("n", [2, 4])
def test_collectives_over_redis_match_the_tcp_relay(redis_server, tmp_path, n, channel):
    url, client = redis_server
    ours = run_program(COLL, n, tmp_path, "redis", relay=url, channel=channel)
    assert ours == reference(COLL, n, tmp_path)
    assert fmpi_keys(client) == []


def test_lowercase_collectives_at_four_ranks_over_redis(redis_server, tmp_path):
    url, client = redis_server
    assert run_program(COLL_LOWER, 4, tmp_path, "redis", relay=url, channel="relay") == reference(COLL_LOWER, 4, tmp_path)
    assert fmpi_keys(client) == []


FAILING = """
from mpi4py import MPI
comm = MPI.COMM_WORLD
print(f"up {{comm.rank}}", flush=True)
if comm.rank == {bad}:
    raise RuntimeError("boom on purpose")
comm.barrier()
print("never", flush=True)
"""


@pytest.mark.parametrize("n,bad", [(2, 1), (4, 2)])
def test_a_failing_rank_ends_the_job_as_on_the_tcp_relay(redis_server, tmp_path, n, bad):
    url, client = redis_server
    script = tmp_path / "fail.py"
    script.write_text(FAILING.format(bad=bad))
    runs = {name: fmpirun(n, script, relay=relay, channel="relay", timeout=60) for name, relay in (("redis", url), ("tcp", None))}
    for name, done in runs.items():
        assert done.returncode == 1, f"{name}: {done.returncode}\n{done.stderr}"
        assert f"fmpirun: job aborted by rank {bad}: uncaught RuntimeError on rank {bad}: boom on purpose" in done.stderr, name
        assert f"[{bad}] RuntimeError: boom on purpose" in done.stderr, name
        assert "never" not in done.stdout, name
        # (The other ranks' own lines race with the abort that ends them, on either relay.)
        assert f"[{bad}] up {bad}" in done.stdout.splitlines(), name
    assert fmpi_keys(client) == []


def test_exit_status_and_tagged_output_as_on_the_tcp_relay(redis_server, tmp_path):
    url, client = redis_server
    script = tmp_path / "exit.py"
    script.write_text(
        "import sys\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\nprint('hello from', c.rank)\n"
        "c.Barrier()\nMPI.Finalize()\nsys.exit(3 if c.rank == 1 else 0)\n"
    )
    redis_run = fmpirun(3, script, relay=url, timeout=60)
    tcp_run = fmpirun(3, script, timeout=60)
    assert redis_run.returncode == tcp_run.returncode == 3, redis_run.stderr
    assert sorted(redis_run.stdout.splitlines()) == sorted(tcp_run.stdout.splitlines()) == [f"[{r}] hello from {r}" for r in range(3)]
    assert "rank 1 exited with status 3" in redis_run.stderr
    assert fmpi_keys(client) == []


LATE_JOINER = """
import os, time
if os.environ["FMPI_RANK"] == "1":
    time.sleep(float(os.environ["LATE_BY"]))  # a cold start, a throttled invocation
from mpi4py import MPI
time.sleep(2)  # compute before the first message
MPI.COMM_WORLD.Barrier()
print("ok", MPI.COMM_WORLD.rank)
"""


def test_a_rank_that_waited_long_for_the_world_is_kept_over_redis(redis_server, tmp_path):
    """Issue 24, defect 1, checked for the Redis rendezvous: a rank that joined seconds before the last one is
    not dropped (Redis has no heartbeats that could count its wait as silence)."""
    url, _client = redis_server
    script = tmp_path / "late.py"
    script.write_text(LATE_JOINER)
    env = dict(os.environ, FMPI_HEARTBEAT_TIMEOUT="2", LATE_BY="5")
    done = subprocess.run(fmpirun_argv("-n", "2", "--relay", url, sys.executable, str(script)), capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted("ok 0 ok 1".split()), done.stdout
