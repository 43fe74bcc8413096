"""The collective API in real fmpirun jobs, one job per program and N (each job checks many cases)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests_support import written_lines

PROGRAMS = Path(__file__).parent / "programs"
NS_ALL = [1, 2, 3, 4, 5, 7, 8]


@pytest.mark.parametrize("n", NS_ALL)
def test_reductions(check, n):
    """Every op x dtype x count x reduction collective, IN_PLACE too, default and large-message paths."""
    check("check_reductions.py", n)


@pytest.mark.parametrize("n", NS_ALL)
def test_movement(check, n):
    check("check_movement.py", n)


@pytest.mark.parametrize("n", NS_ALL)
def test_objects(check, n):
    check("check_objects.py", n)


@pytest.mark.parametrize("n", NS_ALL)
def test_nonblocking(check, n):
    check("check_nonblocking.py", n)


@pytest.mark.parametrize("n", NS_ALL)
def test_communicators_and_isolation(check, n):
    check("check_comms.py", n)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_large_buffers(check, n):
    check("check_large.py", n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [5, 7, 8])
def test_large_buffers_more_ranks(check, n):
    check("check_large.py", n)


def test_forced_algorithms_through_the_environment(check):
    """FMPI_COLL_ALGO and FMPI_COLL_<KNOB> reach the table in every rank."""
    env = {
        "FMPI_COLL_ALGO": "allreduce:ring,bcast:scatter_allgather,allgather:ring,gather:linear,scatter:linear",
        "FMPI_COLL_SEGMENT": "40",
    }
    check("check_movement.py", 3, env=env)


# ----------------------------------------------------------- against MPICH

@pytest.mark.parametrize("program", ["diff_lowercase.py", "diff_uppercase.py", "diff_comms.py", "diff_repeated.py"])
@pytest.mark.parametrize("n", [1, 3, 4])
def test_same_results_as_mpich(fmpi, mpich, tmp_path, program, n):
    ours, ref = tmp_path / "fmpi", tmp_path / "mpich"
    ours.mkdir()
    ref.mkdir()
    a = fmpi(n, PROGRAMS / program, str(ours))
    assert a.returncode == 0, a.stderr[-3000:]
    b = mpich(n, PROGRAMS / program, str(ref))
    assert b.returncode == 0, b.stderr[-3000:]
    assert written_lines(ours, "rank*.txt") == written_lines(ref, "rank*.txt")
    assert len(written_lines(ours, "rank*.txt")) >= 10 * n
