"""Checkpoint/restart with real fmpirun launches: a job longer than its time limit finishes with the same result.

k-means (apps/kmeans.py) is run whole, then under a 4 s per-launch deadline
that takes several launches; the printed result must be bit-identical. (The
deadline leaves a loaded machine time to start four ranks and make a step;
the budget lets it take many launches: progress, not speed, is the point.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests_support import REPO, fmpirun_argv

KMEANS = ["python", str(REPO / "apps" / "kmeans.py"), "--iterations", "100", "--points", "100000"]
QUICK = {"FMPI_CHECKPOINT_EVERY": "0", "FMPI_CHECKPOINT_MARGIN": "0.5"}


def _run(*args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(fmpirun_argv(*args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


def _result(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("kmeans "))


@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_kmeans_past_its_time_limit_is_relaunched_and_bit_identical(tmp_path):
    whole = _run("-n", "4", *KMEANS)
    assert whole.returncode == 0, whole.stderr
    store = tmp_path / "ckpt"
    relaunched = _run("-n", "4", "--timeout", "4", "--max-runtime", "800", "--checkpoint-url", store.as_uri(),
                      *KMEANS, env=QUICK, timeout=900)
    assert relaunched.returncode == 0, relaunched.stderr
    launches = int(re.search(r"the job ended after (\d+) launches", relaunched.stderr).group(1))
    assert launches >= 2, relaunched.stderr
    assert _result(relaunched.stdout) == _result(whole.stdout)
    assert "exited with status 75" not in relaunched.stderr  # a stop at a checkpoint is nobody's fault
    # A URL the user chose is kept (they may want it); its newest checkpoint is the last step.
    assert '"step": 100' in (store / "manifest.json").read_text()
    assert sorted(p.name for p in store.iterdir()) == ["manifest.json", "step-000000000100"]


@pytest.mark.slow
def test_a_spent_budget_says_where_to_continue_and_the_same_url_finishes_the_job(tmp_path):
    store = tmp_path / "ckpt"
    longer = [*KMEANS[:3], "200", *KMEANS[4:]]
    first = _run("-n", "2", "--timeout", "2", "--max-runtime", "3", "--checkpoint-url", store.as_uri(), *longer, env=QUICK)
    assert first.returncode == 124, first.stderr
    assert f"--checkpoint-url {store.as_uri()} to continue" in first.stderr
    rest = _run("-n", "2", "--max-runtime", "1h", "--checkpoint-url", store.as_uri(), *longer, env=QUICK)
    assert rest.returncode == 0, rest.stderr
    whole = _run("-n", "2", *longer)
    assert _result(rest.stdout) == _result(whole.stdout)


CRASH_IN_CHECKPOINT = """
import os, sys, time
import numpy as np
from mpi4py import MPI
from fmpi import checkpoint
comm = MPI.COMM_WORLD


class DiesWhilePickled:
    def __reduce__(self):
        # Killed inside its checkpoint, after every rank agreed to write one and once rank 0's part is in
        # (written whole by a rename; without the wait the launcher may stop rank 0 before it writes).
        part = os.path.join(os.environ["FMPI_CHECKPOINT_URL"].removeprefix("file://"), "step-000000000003", "rank-0")
        deadline = time.monotonic() + 60
        while not os.path.exists(part) and time.monotonic() < deadline:
            time.sleep(0.01)
        os._exit(9)


state, step = checkpoint.restore(np.full(3, comm.rank, dtype=float), 0)
print(f"rank {comm.rank} restored step {step} state {state.tolist()}", flush=True)
while step < 4:
    state += 1.0
    step += 1
    crash = step == 3 and comm.rank == 1 and sys.argv[1] == "crash"
    checkpoint.save([state, DiesWhilePickled()] if crash else state, step)  # rank 0 writes its part of step 3
print(f"rank {comm.rank} done state {state.tolist()}", flush=True)
"""


def test_a_rank_killed_mid_checkpoint_leaves_the_newest_complete_one_intact(tmp_path):
    program = tmp_path / "crash.py"
    program.write_text(CRASH_IN_CHECKPOINT)
    store = tmp_path / "ckpt"
    crashed = _run("-n", "2", "--checkpoint-url", store.as_uri(), sys.executable, str(program), "crash", env=QUICK)
    assert crashed.returncode == 9, crashed.stderr
    assert '"step": 2' in (store / "manifest.json").read_text()
    assert (store / "step-000000000003" / "rank-0").exists()  # the half-made checkpoint: never named complete
    again = _run("-n", "2", "--checkpoint-url", store.as_uri(), sys.executable, str(program), "fine", env=QUICK)
    assert again.returncode == 0, again.stderr
    assert "rank 1 restored step 2 state [3.0, 3.0, 3.0]" in again.stdout
    assert "rank 0 done state [4.0, 4.0, 4.0]" in again.stdout and "rank 1 done state [5.0, 5.0, 5.0]" in again.stdout
    assert sorted(p.name for p in store.iterdir()) == ["manifest.json", "step-000000000004"]


def test_a_checkpoint_of_another_world_size_is_refused_with_the_size_to_use(tmp_path):
    program = tmp_path / "crash.py"
    program.write_text(CRASH_IN_CHECKPOINT)
    store = tmp_path / "ckpt"
    assert _run("-n", "2", "--checkpoint-url", store.as_uri(), sys.executable, str(program), "fine", env=QUICK).returncode == 0
    other = _run("-n", "3", "--checkpoint-url", store.as_uri(), sys.executable, str(program), "fine")
    assert other.returncode != 0
    assert "was written by 2 ranks; this world has 3: restart with -n 2" in other.stderr, other.stderr


def test_without_fmpirun_checkpointing_is_a_no_op_and_the_app_runs_under_plain_python():
    done = subprocess.run([sys.executable, str(REPO / "apps" / "kmeans.py"), "--iterations", "2", "--points", "2000"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={k: v for k, v in os.environ.items() if not k.startswith("FMPI_")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kmeans points=2000")


def test_bad_durations_are_one_usage_error(tmp_path):
    for text in ("soon", "-5", "0", "1x"):
        bad = _run("-n", "1", "--max-runtime", text, sys.executable, "-c", "pass")
        assert bad.returncode == 2, (text, bad.stderr)
        assert bad.stderr.count("\n") == 1 and "--max-runtime" in bad.stderr, bad.stderr
    assert not Path(tmp_path / "x").exists()


# Each template app, stopped after its first part and continued by a second launch from the checkpoint,
# prints what one uninterrupted run prints (deterministic: the split is by step count, not by time).
APPS = {
    "kmeans": (["--points", "20000"], "--iterations", 6, 12),
    "logreg": (["--points", "20000"], "--iterations", 20, 40),
    "jacobi": (["--nx", "64", "--ny", "64"], "--iterations", 150, 300),
    "mlp": (["--train", "8192", "--test", "1024"], "--epochs", 1, 2),
}


@pytest.mark.parametrize("app", sorted(APPS))
def test_each_template_app_continued_from_a_checkpoint_prints_the_uninterrupted_result(app, tmp_path):
    fixed, knob, first, total = APPS[app]
    program = ["python", str(REPO / "apps" / f"{app}.py"), *fixed]
    url = (tmp_path / "ckpt").as_uri()
    part = _run("-n", "3", "--checkpoint-url", url, *program, knob, str(first), env=QUICK)
    assert part.returncode == 0, part.stderr
    rest = _run("-n", "3", "--checkpoint-url", url, *program, knob, str(total), env=QUICK)
    assert rest.returncode == 0, rest.stderr
    steps = first * (8192 // 256) if app == "mlp" else first  # (mlp checkpoints every minibatch step)
    assert f"fmpi: continuing from the checkpoint of step {steps} ({url})" in rest.stderr, rest.stderr
    whole = _run("-n", "3", *program, knob, str(total))
    assert whole.returncode == 0, whole.stderr
    result = [line for line in rest.stdout.splitlines() if line.startswith(app)]
    assert result == [line for line in whole.stdout.splitlines() if line.startswith(app)] != []
    assert result != [line for line in part.stdout.splitlines() if line.startswith(app)]  # (it did continue)
