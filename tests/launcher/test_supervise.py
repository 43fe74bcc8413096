"""The local backend's supervisor: every rank's exit status counts, however the exits bunch up."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fmpi.launcher.job import Job
from fmpi.launcher.local import _supervise
from fmpi.relay_server.server import RelayThread
from fmpi.rendezvous.relay_connection import Aborted


def test_a_failing_exit_that_arrives_with_the_last_ones_is_not_lost():
    # Ranks that all exit at the same instant used to end the wait loop
    # before the last batch of exits was looked at: a status 3 became 0.
    relay = RelayThread("127.0.0.1", 0)
    try:
        for trial in range(4):
            job = Job("tcp://{}:{}".format(*relay.address), 4, 10.0)
            at = time.time() + 0.3
            codes = [0, 0, 0, 3] if trial % 2 else [3, 0, 0, 0]
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", f"import time, sys; time.sleep(max(0.0, {at} - time.time())); sys.exit({c})"]
                )
                for c in codes
            ]
            try:
                outcome = _supervise(job, procs)
            finally:
                job.end()
            assert outcome.code == 3, (trial, outcome)
            assert outcome.message == f"rank {codes.index(3)} exited with status 3"
    finally:
        relay.stop()


def _exit_with(code_or_signal: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import os, sys, signal; {code_or_signal}"])


def _abort_from(job: Job, rank: int, reason: str, cause: dict | None) -> None:
    """What the relay tells the launcher when `rank` aborts (the events thread's update)."""
    exc = Aborted(1, reason, rank, cause)
    job._update(lambda s: s.aborts.append(exc))


@pytest.mark.parametrize("seen_first", ["kill", "consequence"])
def test_an_abort_that_is_a_consequence_of_the_job_abort_does_not_hide_the_kill(seen_first):
    # Rank 2 is killed; fmpirun aborts the job; rank 0 fails with "job
    # aborted", raises, and aborts in turn. Its abort says it is a
    # consequence: the kill is the cause, whichever exit fmpirun saw first
    # (on a loaded machine the reaper of rank 2 can run after rank 0 ended).
    relay = RelayThread("127.0.0.1", 0)
    try:
        job = Job("tcp://{}:{}".format(*relay.address), 3, 10.0)
        killed = _exit_with("os.kill(os.getpid(), signal.SIGKILL)")
        killed.wait()
        _abort_from(job, 0, "uncaught Exception on rank 0: job aborted by the launcher: rank 2 failed", {"aborted": True})
        consequence = _exit_with("sys.exit(1)")
        if seen_first == "consequence":
            consequence.wait()
            procs = [consequence, _exit_with("sys.exit(0)"), _later(killed)]
        else:
            procs = [_later(consequence), _exit_with("sys.exit(0)"), killed]
        outcome = _supervise(job, procs)
        job.end()
        assert (outcome.code, outcome.message) == (137, "rank 2 was killed by signal SIGKILL")
    finally:
        relay.stop()


class _later:
    """A process whose end the supervisor learns 0.5 s after it happened (its reaper is slow)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def wait(self, timeout: float | None = None) -> int:
        code = self.proc.wait(timeout)
        time.sleep(0.5)
        return code


@pytest.mark.parametrize(
    "cause, expected",
    [
        ({"lost": 2}, (137, "rank 2 was killed by signal SIGKILL")),  # the abort names the death: the death is the cause
        (None, (1, "job aborted by rank 0: rank 2 is gone")),  # an abort of its own (whatever its words): it is the cause
    ],
)
def test_a_peer_that_noticed_a_death_first_is_not_blamed_for_it(cause, expected):
    relay = RelayThread("127.0.0.1", 0)
    try:
        job = Job("tcp://{}:{}".format(*relay.address), 3, 10.0)
        killed = _exit_with("os.kill(os.getpid(), signal.SIGKILL)")
        killed.wait()
        _abort_from(job, 0, "rank 2 is gone", cause)
        survivor = _exit_with("sys.exit(1)")
        survivor.wait()  # rank 0's exit (on its abort) is seen before rank 2's
        outcome = _supervise(job, [survivor, _exit_with("sys.exit(0)"), killed])
        job.end()
        assert (outcome.code, outcome.message) == expected
    finally:
        relay.stop()
