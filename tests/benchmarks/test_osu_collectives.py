"""benchmarks/collectives/osu_collectives.py: what a cell keeps over repeated runs, the spread note, a real run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests_support import REPO, load_script

RELATIVE = "benchmarks/collectives/osu_collectives.py"
SCRIPT = REPO / RELATIVE
osu = load_script(RELATIVE, "osu_collectives")
SAMPLES = {
    "fmpi": {("allreduce", 8): [30.0, 90.0, 33.0], ("barrier", 0): [20.0, 21.0, 22.0]},
    "mpich-shm": {},
    "fmpi-tcp": {("allreduce", 1 << 20): [2000.0, 2100.0]},
    "mpich-tcp": {("allreduce", 1 << 20): [850.0, 1800.0]},
}


def test_a_cell_keeps_the_minimum_or_the_median_of_its_runs():
    assert osu.summarize(SAMPLES, "min")["fmpi"] == {("allreduce", 8): 30.0, ("barrier", 0): 20.0}
    assert osu.summarize(SAMPLES, "median")["fmpi"] == {("allreduce", 8): 33.0, ("barrier", 0): 21.0}
    assert osu.summarize(SAMPLES, "median")["mpich-tcp"] == {("allreduce", 1 << 20): 1325.0}


def test_the_spread_note_lists_only_cells_whose_runs_lie_far_apart():
    note = osu.spread_note(SAMPLES)
    assert note == ("Runs more than 1.25× apart: fmpi allreduce 8 B: 30.0-90.0 µs; "
                    "mpich-tcp allreduce 1 MiB: 850.0-1,800 µs.")
    assert osu.spread_note({b: {} for b in osu.BACKENDS}) == ""
    assert osu.spread_note({"fmpi": {("allreduce", 8): [10.0]}}) == ""  # one run: no spread to speak of


@pytest.mark.parametrize("argv, message", [
    (["--repeat", "0"], "--repeat must be at least 1, not 0"),
    (["--stat", "mean"], "invalid choice: 'mean'"),
])
def test_bad_options_get_one_clear_error(argv, message):
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr


@pytest.mark.slow
def test_a_tiny_run_prints_the_medians_of_both_libraries():
    env = dict(os.environ)
    env.pop("FMPI_COLL_ALGO", None)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--ns", "2", "--colls", "allreduce", "--sizes", "8", "--scale", "0.1",
         "--repeat", "3", "--stat", "median"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "Each cell: the median over 3 runs, the backends interleaved." in lines
    rows = [line for line in lines if line.startswith("| allreduce | 8 B |")]
    assert len(rows) == 1, proc.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert "—" not in cells, rows[0]  # every backend ran, every ratio was computed
