"""Heartbeats between ranks and a real fmpi-relay: silence is noticed on both sides, within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests_support import fmpirun_argv, pids_alive

WAITER = """
import os, sys
from mpi4py import MPI
c = MPI.COMM_WORLD
open(os.path.join({pids!r}, str(os.getpid())), "w").close()
c.Barrier()
open(os.path.join({pids!r}, "ready-" + str(c.rank)), "w").close()
c.recv(source=(c.rank + 1) % c.size)  # nobody ever sends
"""


def test_ranks_leave_when_their_relay_goes_silent(relay_process, tmp_path):
    # A stopped relay keeps its TCP connections open (the kernel answers for
    # it): only the missing heartbeats tell the ranks it is gone.
    relay = relay_process()
    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "waiter.py"
    script.write_text(WAITER.format(pids=str(pids)))
    env = dict(os.environ, FMPI_HEARTBEAT_TIMEOUT="2", FMPI_RELAY_REJOIN="2")  # (it never comes back)
    proc = subprocess.Popen(
        fmpirun_argv("-n", "3", "--relay", relay.url, sys.executable, str(script)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while len(list(pids.glob("ready-*"))) < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        relay.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"fmpirun did not end: {out} {err}")
        took = time.monotonic() - stopped
    finally:
        relay.proc.send_signal(signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "no word from the relay for" in err, err
    assert took < 15, f"ranks took {took:.1f} s to notice"
    assert not pids_alive(int(p.name) for p in pids.iterdir() if p.name.isdigit())


LATE_JOINER = """
import os, time
if os.environ["FMPI_RANK"] == "1":
    time.sleep(float(os.environ["LATE_BY"]))  # a cold start, a throttled invocation
from mpi4py import MPI
time.sleep(2)  # compute before the first message: only heartbeats speak for the rank now
MPI.COMM_WORLD.Barrier()
print("ok", MPI.COMM_WORLD.rank)
"""


def test_a_rank_that_waited_long_for_the_world_is_not_taken_for_silent(tmp_path):
    # Ranks beat only once their world is out: the time a rank spent waiting
    # for the last one to join is not silence (issue 24, defect 1).
    script = tmp_path / "late.py"
    script.write_text(LATE_JOINER)
    env = dict(os.environ, FMPI_HEARTBEAT_TIMEOUT="2", LATE_BY="5")
    done = subprocess.run(fmpirun_argv("-n", "2", sys.executable, str(script)), capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted("ok 0 ok 1".split()), done.stdout
