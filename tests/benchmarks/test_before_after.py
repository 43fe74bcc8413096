"""benchmarks/before_after.py: interleaved timings of two source trees, and its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests_support import REPO, load_script

RELATIVE = "benchmarks/before_after.py"
SCRIPT = REPO / RELATIVE
bench = load_script(RELATIVE, "before_after")


def test_the_table_gives_medians_bests_and_ratios():
    samples = {
        "before": {"p2p 8 B": [10.0, 30.0, 20.0], "bandwidth 16 MiB": [100.0, 300.0, 200.0]},
        "after": {"p2p 8 B": [12.0, 22.0, 40.0], "bandwidth 16 MiB": [150.0, 250.0, 400.0]},
    }
    rows = bench.table(samples, ("before", "after"))
    assert rows[2] == "| p2p 8 B | 20.0 µs | 22.0 µs | 1.100 | 10.0 µs | 12.0 µs | 1.200 |"
    # bandwidth: the best run is the highest
    assert rows[3] == "| bandwidth 16 MiB | 200.0 MB/s | 250.0 MB/s | 1.250 | 300.0 MB/s | 400.0 MB/s | 1.333 |"


def test_a_tree_without_its_own_fmpirun_is_refused(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--before", str(tmp_path), "--after", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode != 0 and "has no .venv/bin/fmpirun" in proc.stderr


def _tree_of_this_environment(root: Path) -> Path:
    """A 'source tree' whose .venv is the environment under test (so no second install is needed)."""
    (root / ".venv").mkdir(parents=True)
    (root / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    return root


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_trees_are_run_interleaved_and_compared(tmp_path):
    a = _tree_of_this_environment(tmp_path / "a")
    b = _tree_of_this_environment(tmp_path / "b")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--before", str(a), "--after", str(b), "--rounds", "2", "--scale", "0.01"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("done") == 2  # (one line per round)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and ("µs" in line or "MB/s" in line)]
    cases = [row.split(" | ")[0].lstrip("| ") for row in rows]
    assert cases == ["allreduce 8 B N=2", "p2p 8 B", "bandwidth 16 MiB", "allreduce 8 B N=4"]
