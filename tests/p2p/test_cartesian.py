"""Cartesian topologies (Create_cart, Shift, Sub, Compute_dims), differential against real MPICH."""

from pathlib import Path

import pytest

PROGRAM = Path(__file__).with_name("cart_program.py")


def _results(directory: Path) -> dict[str, str]:
    return {f.name: f.read_text() for f in sorted(directory.glob("rank*.txt"))}


@pytest.mark.parametrize("n", [1, 4, 6])
def test_cartesian_topology_matches_mpich(n, fmpi, mpich, tmp_path):
    ours, ref = tmp_path / "fmpi", tmp_path / "mpich"
    ours.mkdir()
    ref.mkdir()
    a = fmpi(n, PROGRAM, str(ours))
    assert a.returncode == 0, a.stderr
    b = mpich(n, PROGRAM, str(ref))
    assert b.returncode == 0, b.stderr
    assert _results(ours) == _results(ref)
    assert len(_results(ours)) == n
