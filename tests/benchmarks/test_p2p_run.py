"""benchmarks/p2p/run.py: the point-to-point table (fmpi, raw socket, MPICH tcp and shm) and its --repeat."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests_support import REPO, load_script

RELATIVE = "benchmarks/p2p/run.py"
SCRIPT = REPO / RELATIVE


def _run_module():
    return load_script(RELATIVE, "p2p_run")


def test_repeated_runs_keep_the_lowest_latency_and_the_highest_bandwidth():
    better = _run_module()._better
    first = {"size": 8, "latency_us": 30.0, "bandwidth_MBps": 100.0}
    second = {"size": 8, "latency_us": 20.0, "bandwidth_MBps": 50.0}
    assert better(None, first) == first
    assert better(first, second) == {"size": 8, "latency_us": 20.0, "bandwidth_MBps": 100.0}
    assert better(second, first) == {"size": 8, "latency_us": 20.0, "bandwidth_MBps": 100.0}
    # 0 B has a latency but no bandwidth
    zero = {"size": 0, "latency_us": 9.0, "bandwidth_MBps": None}
    assert better(zero, dict(zero, latency_us=7.0)) == {"size": 0, "latency_us": 7.0, "bandwidth_MBps": None}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_py_prints_both_tables_for_every_backend():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--max-size", "4096", "--seconds", "0.01", "--repeat", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert (
        "| size | raw socket lat µs | fmpi tcp lat µs | MPICH tcp lat µs | fmpi lat µs | MPICH shm lat µs "
        "| fmpi tcp/raw | fmpi tcp/MPICH tcp | fmpi/MPICH shm |"
    ) in lines
    assert "| size | raw socket MB/s | fmpi tcp MB/s | MPICH tcp MB/s | fmpi MB/s | MPICH shm MB/s | fmpi tcp/raw | fmpi/MPICH shm |" in lines
    sizes = [0] + [1 << k for k in range(13)]
    latency_rows = [line for line in lines if line.count("|") == 10 and line.split("|")[1].strip().isdigit()]
    assert [int(row.split("|")[1]) for row in latency_rows] == sizes
    for row in latency_rows:
        assert all(float(cell) > 0 for cell in row.strip("|").split("|")[1:6]), row


@pytest.mark.parametrize("placement", [[], ["--same-cpu"]])
def test_raw_socket_runs_pinned_apart_and_on_one_cpu(placement):
    raw = SCRIPT.parent / "raw_socket.py"
    proc = subprocess.run([sys.executable, str(raw), "--max-size", "64", "--seconds", "0.01", *placement],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [json.loads(row)["size"] for row in rows] == [0, 1, 2, 4, 8, 16, 32, 64]
    assert all(json.loads(row)["latency_us"] > 0 for row in rows)
