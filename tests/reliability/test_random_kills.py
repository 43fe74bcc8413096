"""Kill a random rank at a random point of a collective-heavy job, 20 times.

Each trial starts ``fmpirun -n N`` (N = 4..6) on a program that loops over
allreduce / bcast / alltoall / barrier / Allreduce on numpy data of varying
sizes plus ring point-to-point, checking every result. Once every rank has
finished its first round, after a random delay, one random rank is ended by
one of:

* ``SIGKILL``                    -> "rank R was killed by signal SIGKILL" (status 137)
* ``os._exit(5)`` (via SIGUSR2)  -> "rank R exited with status 5" (status 5)
* an uncaught exception raised wherever the rank's main thread is at that
  moment (via SIGUSR1)           -> "uncaught InjectedFault on rank R" (status 1)
* ``SIGSTOP`` (the process lives, its sockets stay open: only the missing
  heartbeats tell)               -> "rank R stopped responding" (status 1)

and the trial checks that fmpirun exits with that status within
``BOUND`` seconds of the kill, that its message names that rank and cause,
and that no rank process is left (each rank records its pid in a file).

Replay: every trial's parameters come from its seed, printed in every
failure message; ``FMPI_KILL_SEED=<seed> pytest -m slow tests/reliability -k "trial_07"``
runs that trial again with the same rank, cause, delay, size and channel.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests_support import fmpirun_argv, pids_alive

pytestmark = pytest.mark.slow

TRIALS = 20
BOUND = 15.0  # seconds from the kill to fmpirun's exit
BASE_SEED = int(os.environ.get("FMPI_KILL_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)

PROGRAM = r'''
import os, signal, sys, time
import numpy as np
from mpi4py import MPI

class InjectedFault(Exception):
    pass

def _raise(signum, frame):
    raise InjectedFault("injected at a random point")

signal.signal(signal.SIGUSR1, _raise)
signal.signal(signal.SIGUSR2, lambda signum, frame: os._exit(5))

comm = MPI.COMM_WORLD
r, n = comm.rank, comm.size
pids = sys.argv[1]
open(os.path.join(pids, f"{r}-{os.getpid()}"), "w").close()
rng = np.random.default_rng(int(sys.argv[2]))  # the same sizes on every rank
it = 0
while True:
    count = int(rng.choice([1, 17, 1000, 40_000, 300_000]))
    x = np.full(count, r + 1, dtype=np.float64)
    assert np.all(comm.allreduce(x, op=MPI.SUM) == n * (n + 1) / 2)
    y = np.empty(count, dtype=np.float64)
    comm.Allreduce(x, y, op=MPI.MAX)
    assert np.all(y == n)
    root = it % n
    b = np.full(count, root, dtype=np.int32) if r == root else np.empty(count, dtype=np.int32)
    comm.Bcast(b, root=root)
    assert np.all(b == root)
    assert comm.bcast({"it": it, "root": root} if r == root else None, root=root) == {"it": it, "root": root}
    parts = comm.alltoall([np.full(count // n + 1, r * 100 + d, dtype=np.int64) for d in range(n)])
    assert all(np.all(p == s * 100 + r) for s, p in enumerate(parts))
    comm.barrier()
    right, left = (r + 1) % n, (r - 1) % n
    got = comm.sendrecv(np.full(count, r, dtype=np.int16), dest=right, source=left)
    assert np.all(got == left)
    req = comm.isend(it, dest=left, tag=7)
    assert comm.recv(source=right, tag=7) == it
    req.wait()
    if it == 0:
        open(os.path.join(pids, f"ready-{r}"), "w").close()
    it += 1
'''

CAUSES = {
    "sigkill": (137, "rank {rank} was killed by signal SIGKILL"),
    "exit": (5, "rank {rank} exited with status 5"),
    "exception": (1, "uncaught InjectedFault on rank {rank}"),
    "sigstop": (1, "rank {rank} stopped responding"),
}


def _trial(seed: int, index: int) -> dict:
    rng = random.Random(seed)
    n = rng.randint(4, 6)
    return {
        "n": n,
        "rank": rng.randrange(n),
        "cause": list(CAUSES)[index % len(CAUSES)],  # every cause 5 times over the 20 trials
        "delay": round(rng.uniform(0.0, 2.0), 3),
        "data_seed": rng.randrange(2**31),
        "channel": rng.choice(["auto", "auto", "relay"]),
    }


@pytest.mark.parametrize("index", range(TRIALS), ids=[f"trial_{i:02d}" for i in range(TRIALS)])
def test_a_random_rank_killed_at_a_random_point_ends_the_job_cleanly(tmp_path, index):
    seed = BASE_SEED + index
    t = _trial(seed, index)
    where = f"[trial {index}, seed FMPI_KILL_SEED={BASE_SEED} (trial seed {seed}): {t}]"
    pids = tmp_path / "pids"
    pids.mkdir()
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    out, err = open(tmp_path / "out", "w+"), open(tmp_path / "err", "w+")
    env = dict(os.environ, FMPI_CHANNEL=t["channel"], OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen(
        fmpirun_argv("-n", str(t["n"]), sys.executable, str(prog), str(pids), str(t["data_seed"])),
        stdout=out, stderr=err, env=env, start_new_session=True,
    )
    victim = None
    try:
        deadline = time.monotonic() + 60
        while len(list(pids.glob("ready-*"))) < t["n"]:
            if proc.poll() is not None or time.monotonic() > deadline:
                err.seek(0)
                pytest.fail(f"the job did not get going {where}: status {proc.poll()}\n{err.read()[-3000:]}")
            time.sleep(0.02)
        time.sleep(t["delay"])
        victim = next(int(p.name.split("-")[1]) for p in pids.glob(f"{t['rank']}-*"))
        sig = {"sigkill": signal.SIGKILL, "exit": signal.SIGUSR2, "exception": signal.SIGUSR1, "sigstop": signal.SIGSTOP}
        os.kill(victim, sig[t["cause"]])
        killed = time.monotonic()
        try:
            proc.wait(BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"fmpirun did not end within {BOUND:g} s of the kill {where}")
        took = time.monotonic() - killed
        out.seek(0)
        err.seek(0)
        stderr = err.read()
        code, message = CAUSES[t["cause"]]
        message = message.format(rank=t["rank"])
        assert proc.returncode == code, f"status {proc.returncode}, expected {code} {where}\n{stderr[-3000:]}"
        assert message in stderr, f"no {message!r} in fmpirun's output {where}\n{stderr[-3000:]}"
        others = [r for r in range(t["n"]) if r != t["rank"]]
        first_line = next((l for l in stderr.splitlines() if l.startswith("fmpirun: ") and "links:" not in l), "")
        assert f"rank {t['rank']}" in first_line, f"fmpirun's first word names {first_line!r} {where}\n{stderr[-3000:]}"
        left = pids_alive(int(p.name.split("-")[1]) for p in pids.glob("*-*") if not p.name.startswith("ready"))
        assert not left, f"rank processes left behind: {left} {where}"
        assert len(list(pids.glob("[0-9]*-*"))) == t["n"]
        print(f"trial {index}: {t['cause']} of rank {t['rank']} of {t['n']} ({t['channel']}): ended in {took:.1f} s")
        assert others  # (n >= 4)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in pids.glob("[0-9]*-*"):
            pid = int(p.name.split("-")[1])
            if pids_alive([pid]):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        out.close()
        err.close()
