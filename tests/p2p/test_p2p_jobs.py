"""Point-to-point semantics in real fmpirun jobs, differential against real MPICH + mpi4py."""

from pathlib import Path

import pytest

PROGRAM = Path(__file__).with_name("p2p_semantics.py")


def _results(directory: Path) -> list[str]:
    return sorted(line for f in directory.glob("rank*.txt") for line in f.read_text().splitlines())


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_p2p_semantics_match_mpich(n, fmpi, mpich, tmp_path):
    # 64 MiB at n=2 (the bar for large messages), 1 MiB elsewhere to keep the suite quick.
    nbytes = str(64 << 20 if n == 2 else 1 << 20)
    ours_dir, ref_dir = tmp_path / "fmpi", tmp_path / "mpich"
    ours_dir.mkdir()
    ref_dir.mkdir()
    ours = fmpi(n, PROGRAM, nbytes, str(ours_dir))
    assert ours.returncode == 0, ours.stderr
    reference = mpich(n, PROGRAM, nbytes, str(ref_dir))
    assert reference.returncode == 0, reference.stderr
    assert _results(ours_dir) == _results(ref_dir)
    # Every rank ran every applicable check (guards against a silently shortened run).
    ring = [line for line in _results(ours_dir) if " ring_obj " in line]
    assert len(ring) == n
    if n > 1:
        assert sum(" large " in line for line in _results(ours_dir)) == 2
