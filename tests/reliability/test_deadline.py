"""fmpi.remaining_time() outside Lambda: infinite, unless FMPI_DEADLINE (epoch seconds) sets a deadline."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

import fmpi
from tests_support import fmpirun_argv


def test_no_platform_limit_locally(monkeypatch):
    monkeypatch.delenv("FMPI_DEADLINE", raising=False)
    assert fmpi.remaining_time() == math.inf


def test_fmpi_deadline_sets_one(monkeypatch):
    monkeypatch.setenv("FMPI_DEADLINE", str(time.time() + 30))
    assert 29 < fmpi.remaining_time() <= 30
    monkeypatch.setenv("FMPI_DEADLINE", str(time.time() - 5))
    assert fmpi.remaining_time() == 0.0
    monkeypatch.setenv("FMPI_DEADLINE", "soon")
    with pytest.raises(ValueError, match="FMPI_DEADLINE must be epoch seconds"):
        fmpi.remaining_time()


def test_ranks_of_a_local_job_see_it(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import fmpi\nfrom mpi4py import MPI\nprint(MPI.COMM_WORLD.rank, fmpi.remaining_time())\n")
    env = {**__import__("os").environ, "FMPI_DEADLINE": str(time.time() + 100)}
    run = subprocess.run(fmpirun_argv("-n", "2", sys.executable, str(prog)), capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    assert all(0 < float(line.split()[1]) <= 100 for line in run.stdout.splitlines()) and len(run.stdout.splitlines()) == 2
