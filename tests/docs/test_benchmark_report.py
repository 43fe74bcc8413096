"""`python benchmarks/report.py --quick` runs the whole suite and writes the report and its plots.

Slow stage: a few minutes of real fmpirun and mpiexec jobs. Numbers are not checked (they depend
on the machine and its load), only that every part ran and landed in the report.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests_support import REPO

PLOTS = ["p2p_latency.png", "p2p_bandwidth.png", "collectives.png", "apps.png"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_report(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "report.py"), "--quick", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = (out / "report.md").read_text()
    for heading in ("# fmpi benchmark report", "## Targets", "## Point-to-point", "## Collectives", "## Applications"):
        assert heading in report, f"missing {heading!r}"
    # p2p: latency and bandwidth tables for the five backends, 0 B to 64 MiB, and the two targets.
    assert "| size | raw socket lat µs | fmpi tcp lat µs | MPICH tcp lat µs | fmpi lat µs | MPICH shm lat µs |" in report
    assert "| size | raw socket MB/s | fmpi tcp MB/s | MPICH tcp MB/s | fmpi MB/s | MPICH shm MB/s | fmpi tcp/raw |" in report
    assert "\n| 0 | " in report and f"\n| {64 << 20} | " in report
    assert "≤ 2× raw socket" in report and "≥ 80 % of raw socket" in report
    hello = next(line for line in report.splitlines() if line.startswith("| `fmpirun -n 4` hello world"))
    assert hello.endswith(("| yes |", "| no |")) and " s |" in hello, hello
    # Collectives at N = 2, 4, 8, each of the five, with numbers (not "—") for every backend.
    for n in (2, 4, 8):
        assert f"### N = {n}" in report
    rows = [line for line in report.splitlines() if line.startswith(("| barrier", "| bcast", "| allreduce", "| allgather", "| alltoall"))]
    assert {row.split("|")[1].strip() for row in rows} == {"barrier", "bcast", "allreduce", "allgather", "alltoall"}
    assert not [row for row in rows if "—" in row.split("|", 3)[3]], "a collective run failed:\n" + "\n".join(rows)
    # Apps: every template under both launchers.
    for app in ("pi", "kmeans", "logreg", "jacobi", "mlp", "samplesort"):
        line = next((row for row in report.splitlines() if row.startswith(f"| {app} |")), None)
        assert line and "—" not in line, f"app {app}: {line}"
    # The shaped lab (root, namespaces: what CI has): fmpi, MPICH and the bound at N = 2 and 4, and its plot.
    sys.path.insert(0, str(REPO / "tests"))
    from natlab.topology import natlab_available

    plots = list(PLOTS)
    if natlab_available()[0]:
        assert "## Collectives on a Lambda-shaped network" in report
        shaped = [line for line in report.splitlines() if line.startswith(("| 2 | allreduce 8 B", "| 4 | bcast 1 MiB"))]
        assert len(shaped) == 2 and not [row for row in shaped if "—" in row.split("|", 3)[3]], shaped
        plots.append("netlab.png")
    for plot in plots:
        data = (out / plot).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000, plot
        assert f"]({plot})" in report
