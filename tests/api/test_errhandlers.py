"""Error handlers as in mpi4py: errors raise MPI.Exception by default; rc.errors / FMPI_ERRORS pick MPI's fatal default."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests_support import fmpirun_argv

PROGRAM = """
{rc}
from mpi4py import MPI
c = MPI.COMM_WORLD
print("handler", c.Get_errhandler() == MPI.ERRORS_RETURN, c.Dup().Get_errhandler() == c.Get_errhandler(), flush=True)
try:
    c.send("x", dest=c.size + 3)  # an invalid rank
except MPI.Exception as exc:
    print("caught", exc.Get_error_class() == MPI.ERR_RANK, flush=True)
c.Barrier()
print("went on", flush=True)
"""


def _run(tmp_path, rc: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(PROGRAM.format(rc=rc)))
    return subprocess.run(
        fmpirun_argv("-n", "2", sys.executable, str(script)), capture_output=True, text=True, timeout=60,
        env=dict(os.environ, **(env or {})),
    )


def test_by_default_errors_raise_and_the_program_may_handle_them(tmp_path):
    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("handler True True") == 2
    assert result.stdout.count("caught True") == 2
    assert result.stdout.count("went on") == 2


@pytest.mark.parametrize("how", ["rc", "env"])
def test_errors_are_fatal_when_asked_for_and_the_job_ends_at_the_error(tmp_path, how):
    if how == "rc":
        result = _run(tmp_path, rc="import mpi4py\nmpi4py.rc.errors = 'fatal'")
    else:
        result = _run(tmp_path, env={"FMPI_ERRORS": "fatal"})
    assert result.returncode != 0
    assert "handler False True" in result.stdout  # ERRORS_ARE_FATAL, inherited by Dup
    assert "caught" not in result.stdout and "went on" not in result.stdout
    assert "invalid rank 5 for a communicator of size 2" in result.stderr
