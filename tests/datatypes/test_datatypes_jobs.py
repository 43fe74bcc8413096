"""Derived datatypes, Alltoallw pencil transposes, topologies and neighborhood collectives:
the same program under fmpirun and under MPICH's mpiexec, results compared line by line."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests_support import written_lines

PROGRAMS = Path(__file__).parent / "programs"



def _same(fmpi, mpich, tmp_path: Path, program: str, n: int, least: int) -> None:
    ours, ref = tmp_path / "fmpi", tmp_path / "mpich"
    ours.mkdir()
    ref.mkdir()
    a = fmpi(n, PROGRAMS / program, str(ours), timeout=180)
    assert a.returncode == 0, a.stderr[-3000:]
    b = mpich(n, PROGRAMS / program, str(ref), timeout=180)
    assert b.returncode == 0, b.stderr[-3000:]
    assert written_lines(ours, "rank*.txt") == written_lines(ref, "rank*.txt")
    assert len(written_lines(ours, "rank*.txt")) >= least * n


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_derived_datatypes_as_mpich(fmpi, mpich, tmp_path, n):
    _same(fmpi, mpich, tmp_path, "diff_datatypes.py", n, 60)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_pencil_transpose_as_mpich(fmpi, mpich, tmp_path, n):
    _same(fmpi, mpich, tmp_path, "diff_pencils.py", n, 4)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_topologies_and_neighborhood_collectives_as_mpich(fmpi, mpich, tmp_path, n):
    _same(fmpi, mpich, tmp_path, "diff_topologies.py", n, 60)
