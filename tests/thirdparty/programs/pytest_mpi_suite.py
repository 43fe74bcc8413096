"""Tests for pytest-mpi's plugin: run as `python -m pytest --with-mpi pytest_mpi_suite.py` on every rank."""

import pytest


@pytest.mark.mpi(min_size=2)
def test_ranks_sum_up():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    assert comm.allreduce(comm.rank) == comm.size * (comm.size - 1) // 2


@pytest.mark.mpi(min_size=2)
def test_tmp_path_is_shared(mpi_tmp_path):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    assert comm.bcast(str(mpi_tmp_path), root=0) == str(mpi_tmp_path)


@pytest.mark.mpi(min_size=64)
def test_skipped_below_64_ranks():
    raise AssertionError("pytest-mpi should have skipped this")


def test_without_mpi():
    assert True
