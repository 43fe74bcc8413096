"""Faults around NAT traversal end in a clear error or a fallback within bounded time, never a hang."""

from __future__ import annotations

import os
import re
import signal
import time

from labjob import LabJobs

LAB_HOSTS = {"c1": "cone", "c2": "cone", "c3": "cone", "s1": "symmetric", "s2": "symmetric"}


def _seconds(text: str, what: str) -> float:
    m = re.search(rf"error after ([\d.]+)s: .*{what}", text)
    assert m, text
    return float(m.group(1))


def test_a_peer_that_never_answers_the_punch_is_an_error_in_bounded_time(nat_job: LabJobs):
    env = {"FMPI_PUNCH_TIMEOUT": "1", "FMPI_RESUME_TIMEOUT": "2"}
    job = nat_job.start_roles(["c1", "c2"], [["send-to", "1"], ["stop-self"]], env=env)
    job.wait_for_line(0, "error after", 30)
    os.killpg(job.ranks[1].pid, signal.SIGKILL)
    run = job.finish(30)
    assert run.ranks[0].returncode == 3, run.describe()
    # punch (1 s deadline) -> relay -> no RESUME from the stopped rank within 2 s
    took = _seconds(run.ranks[0].stdout, "rank 1 did not answer through the relay within 2 s")
    assert took < 8, run.describe()
    assert run.launcher.returncode != 0


def test_a_peer_that_registered_then_died_is_reported_and_the_rest_goes_on(nat_job: LabJobs):
    job = nat_job.start_roles(["c1", "c2", "c3"], [["send-to", "2", "1"], ["pair", "0"], ["die"]])
    run = job.finish(60)
    assert run.ranks[2].returncode == 5
    took = _seconds(run.ranks[0].stdout, "rank 2 is gone")
    assert took < 8, run.describe()
    assert "pair ok" in run.ranks[0].stdout and "pair ok" in run.ranks[1].stdout, run.describe()
    assert run.ranks[0].returncode == 0 and run.ranks[1].returncode == 0, run.describe()
    assert "ranks [2] ended without finalizing" in run.launcher.stderr, run.describe()


def test_a_relay_that_vanishes_during_punching_ends_every_rank_promptly(nat_job: LabJobs):
    # Symmetric NATs and a forced, endless punch: both ranks are punching when the relay dies
    # (for good: ranks wait FMPI_RELAY_REJOIN for a restart, then end).
    env = {"FMPI_CHANNEL": "punch", "FMPI_PUNCH_TIMEOUT": "60", "FMPI_RELAY_REJOIN": "1"}
    job = nat_job.start_roles(["s1", "s2"], [["send-forever", "1"], ["send-forever", "0"]], env=env)
    for r in (0, 1):
        job.wait_for_line(r, "sending", 30)
    time.sleep(1.0)
    killed = time.monotonic()
    nat_job.relay.kill()
    nat_job.relay.wait()
    try:
        run = job.finish(30)
        for r, proc in enumerate(run.ranks):
            assert proc.returncode == 1 and "lost the relay" in proc.stderr, run.describe()
        assert max(p.seconds for p in run.ranks) - (killed - job.started) < 5, run.describe()
        assert run.launcher.returncode != 0
    finally:
        nat_job.relay = nat_job.start_relay()
