"""Compute_dims against real MPICH (via the reference mpi4py in the test environment)."""

import pytest

from fmpi.api import exceptions as err
from fmpi.api.topology import compute_dims

mpi4py_MPI = pytest.importorskip("mpi4py.MPI")  # the reference is a test dependency; always present in CI


def test_compute_dims_matches_mpich_everywhere():
    mismatches = []
    for n in range(1, 130):
        for spec in (1, 2, 3, 4, [0, 2], [2, 0, 0], [0, 0, 3]):
            try:
                expected = mpi4py_MPI.Compute_dims(n, spec)
            except mpi4py_MPI.Exception:
                with pytest.raises(err.Exception):
                    compute_dims(n, spec)
                continue
            if compute_dims(n, spec) != list(expected):
                mismatches.append((n, spec, compute_dims(n, spec), expected))
    assert mismatches == []


def test_bad_dims():
    with pytest.raises(err.Exception):
        compute_dims(0, 2)
    with pytest.raises(err.Exception):
        compute_dims(6, [4, 0])
