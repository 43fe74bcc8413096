"""benchmarks/relay/bench_channels.py (issue 5 item 6) still runs and prints its one table (slow stage only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from tests_support import REPO

SCRIPT = REPO / "benchmarks" / "relay" / "bench_channels.py"
CHANNELS = ["direct TCP", "relay forwarding", "DSO objects", "Redis", "naive store-and-poll"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_bench_channels_tiny():
    env = dict(os.environ)
    env.pop("FMPI_CHANNEL", None)
    env.pop("FMPI_COLL_ALGO", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--ns", "2", "--scale", "0.02", "--sizes", "8", "--repeat", "2"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "| N | channel | send/recv 8 B | barrier | allreduce 8 B | naive / this, allreduce 8 B |" in lines
    for channel in CHANNELS:
        rows = [line for line in lines if line.startswith(f"| 2 | {channel} |")]
        assert len(rows) == 1, (channel, proc.stdout)
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        assert len(cells) == 6
        # every channel has barrier and allreduce; all but the naive baseline have send/recv and a ratio
        assert all(c.endswith("s") for c in cells[3:5]), rows[0]
        if channel != "naive store-and-poll":
            assert cells[2].endswith("s") and cells[5].endswith("×"), rows[0]
    assert any(line.startswith("target: server-side forms") for line in lines)
    assert "the minimum of 2 interleaved runs per cell" in proc.stdout
    assert proc.stderr.count("N = 2 done") == 2  # both runs happened
