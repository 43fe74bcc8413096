"""The job's relay restarts mid-job (SIGKILL, then a new fmpi-relay on the same port): the job carries on.

The relay holds the job itself: rendezvous, the heartbeats, the relayed
links and, with ``--channel relay``, the shared objects of the server-side
collectives. A restarted relay knows none of it. fmpirun creates the job
there again (with every rank's incarnation), the ranks register again and
exchange RESUME over their relayed links, resending what the old relay
lost; shared objects are rebuilt from the ranks' replays. Results must be
exact: nothing lost, repeated or reordered.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests_support import RelayProcess, fmpirun_argv, pids_alive, ranks_that_said

PROGRAM = """
import os, sys
import numpy as np
from mpi4py import MPI
world = MPI.COMM_WORLD
rank, size = world.rank, world.size
steps = int(sys.argv[2])
open(sys.argv[1] + f".{rank}", "w").write(str(os.getpid()))  # (started: the test may kill the relay now)
right, left = (rank + 1) % size, (rank - 1) % size
total = 0
for step in range(steps):
    x = np.full(3, (rank + 1) * (step + 1), dtype=np.int64)
    y = np.empty_like(x)
    world.Allreduce(x, y, op=MPI.SUM)
    world.Barrier()
    total += int(y.sum())
    out = np.arange(20000, dtype=np.int64) + rank * 1000003 + step  # 160 KB: relayed in several chunks
    got = np.empty_like(out)
    world.Sendrecv(out, right, 7, got, left, 7)
    if not (got == np.arange(20000, dtype=np.int64) + left * 1000003 + step).all():
        print("FAIL", rank, step, flush=True)
        sys.exit(3)
    total += int(got[0])
    if step == steps // 2:
        print(f"rank {rank} half way", flush=True)
print("total", rank, total, flush=True)
"""


def _want(rank: int, size: int, steps: int) -> int:
    left = (rank - 1) % size
    return sum(3 * sum((r + 1) * (s + 1) for r in range(size)) + left * 1000003 + s for s in range(steps))


def _run_with_a_restart(tmp_path, channel: str, n: int, steps: int, down_for: float):
    relay = RelayProcess()
    restarted: list[RelayProcess] = []
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    proc = subprocess.Popen(
        fmpirun_argv("-n", str(n), "--relay", relay.url, "--channel", channel, sys.executable, str(prog),
                     str(tmp_path / "started"), str(steps)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, FMPI_RELAY_REJOIN="20"),
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("started.*"))) < n and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(0.3)  # well inside the loop: collectives and relayed messages in flight
        relay.proc.kill()
        relay.proc.wait()
        time.sleep(down_for)
        restarted.append(RelayProcess("--port", str(relay.address[1])))
        out, err = proc.communicate(timeout=120)
        pids = [int(p.read_text()) for p in tmp_path.glob("started.*")]
        return proc.returncode, out, err, pids
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        for r in (relay, *restarted):
            r.stop()


@pytest.mark.parametrize("channel", ["relay", "direct"])
def test_a_job_survives_a_restart_of_its_relay(tmp_path, channel):
    # relay: every message and collective goes through the relay that restarts;
    # direct: TCP links between the ranks, the relay only carries control and heartbeats.
    n, steps = 3, 2000
    code, out, err, pids = _run_with_a_restart(tmp_path, channel, n, steps, down_for=0.5)
    assert code == 0, err
    totals = {int(r): int(t) for word, r, t in (line.split() for line in out.splitlines() if line.startswith("total"))}
    assert totals == {r: _want(r, n, steps) for r in range(n)}, (out, err)
    assert "waiting up to 20 s for it to come back" in err and "the job resumed there" in err, err
    assert ranks_that_said(err, "rejoined the job") == n, err
    assert not pids_alive(pids)
