"""``fmpirun --backend lambda --relay redis://...`` end to end against moto: Redis is the ranks' only rendezvous.

The emulated ranks are awslambdaric processes on this host (the plain mode,
no network namespaces), so they reach the test's redis-server on 127.0.0.1.
The job must behave as with fmpi-relay (same output, same exit status), and
leave no key behind in the user's Redis.

The deployment zip bundles redis-py (packaging.VENDORED): the default function
must join through Redis with nothing added by the user.
"""

from __future__ import annotations

import json

import pytest
from lambda_testing import PROGRAMS

N = 4


def _fmpi_keys(client) -> list[bytes]:
    return list(client.scan_iter(match="fmpi:*", count=1000))


def _rank_results(moto, before: int) -> str:
    """What the ranks' invocations returned (their errors, when a job failed), for assertion messages."""
    moto.ctrl.wait_idle(30)
    return "\nrank invocations:\n" + "\n".join(str(r.get("payload"))[:600] for r in moto.ctrl.history[before:])


def _expected(n: int) -> list[str]:
    lines = [f"rank 0/{n} token={sum(range(n))} bcast=['alpha', 'beta'] max={n - 1} sum={n * (n + 1) // 2}"]
    lines += [f"rank {r}/{n} token=- bcast=['alpha', 'beta'] max={n - 1} sum=None" for r in range(1, n)]
    return sorted(lines)


@pytest.mark.parametrize("channel", [None, "relay"])
def test_ring_and_collectives_over_redis(lambda_run, moto, redis_server, channel):
    url, client = redis_server
    assert not _fmpi_keys(client)
    before = len(moto.ctrl.history)
    chan = ("--channel", channel) if channel else ()
    run = lambda_run(N, PROGRAMS / "ring_collectives.py", "alpha", "beta", extra=("--relay", url, *chan))
    assert run.returncode == 0, run.stderr + _rank_results(moto, before)
    assert sorted(run.lines()) == _expected(N), run.stdout
    assert "pw-for-tests" not in run.stdout + run.stderr  # the Redis password is never printed
    assert moto.ctrl.wait_idle(30)
    summaries = [json.loads(r["payload"]) for r in moto.ctrl.history[before:] if r["type"] == "Event"]
    assert sorted(s["rank"] for s in summaries) == list(range(N)), summaries
    assert all(s["status"] == "finished" and s["exit_status"] == 0 for s in summaries), summaries
    assert not _fmpi_keys(client), "the job left keys in Redis"
    # The same job over the fmpi-relay that fmpirun starts: the same lines and exit status.
    reference = lambda_run(N, PROGRAMS / "ring_collectives.py", "alpha", "beta", extra=chan)
    assert reference.returncode == run.returncode, reference.stderr
    assert sorted(reference.lines()) == sorted(run.lines())


def test_failing_rank_over_redis(lambda_run, moto, redis_server):
    url, client = redis_server
    before = len(moto.ctrl.history)
    run = lambda_run(3, PROGRAMS / "exit_code.py", extra=("--relay", url))
    assert run.returncode == 4, run.stderr + _rank_results(moto, before)
    assert "rank 1 exited with status 4" in run.stderr
    reference = lambda_run(3, PROGRAMS / "exit_code.py")
    assert reference.returncode == 4, reference.stderr
    assert "rank 1 exited with status 4" in reference.stderr
    assert not _fmpi_keys(client), "the failed job left keys in Redis"


def test_a_rank_whose_slot_a_spare_took_moves_over_redis(lambda_run, moto, redis_server):
    # fmpirun --spare over Redis: the spare starts first and takes slot 0; rank 0's invocation, late, takes the
    # slot that rank 2's (never started) left free, and the world runs with records sealed for the slots they end in.
    url, client = redis_server
    moto.faults.drop = {2}
    moto.faults.delay = {0: 10.0}
    before = len(moto.ctrl.history)
    run = lambda_run(3, PROGRAMS / "hello.py", extra=("--relay", url, "--spare", "1"))
    assert run.returncode == 0, run.stderr + _rank_results(moto, before)
    assert sorted(run.lines()) == [f"hello from rank {r} of 3" for r in range(3)]
    assert moto.ctrl.wait_idle(30)
    late = [r for r in moto.ctrl.history[before:] if r["type"] == "Event" and r.get("spawn", 0) - r["t_api"] >= 9]
    assert [json.loads(r["payload"])["rank"] for r in late] == [2], late  # rank 0's invocation, in slot 2
    assert not _fmpi_keys(client), "the job left keys in Redis"
