"""Libraries from the package index that people run on mpi4py, under fmpirun beside MPICH's mpiexec.

Each row of issue 26's table: the same program (tests/thirdparty/programs, written the way each library's
own docs show) runs under `mpiexec` (MPICH + mpi4py) and under `fmpirun`, and both print the same. The
libraries come from the `thirdparty` extra (scripts/test.sh installs it); the stage is slow.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests_support import run_fmpi, run_mpich

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _both(tmp_path: Path, n: int, name: str, *args: str,
          mpich_args: tuple[str, ...] = (), timeout: float = 180):
    """Run programs/`name` under mpiexec and fmpirun from a folder of its own; both must succeed.

    `mpich_args` go to the reference alone: they steer it around a defect of MPICH's (see the program).
    """
    script = tmp_path / name
    shutil.copy(PROGRAMS / name, script)
    mpich = run_mpich(n, script, *args, *mpich_args, timeout=timeout)
    assert mpich.returncode == 0, f"under mpiexec:\n{mpich.stderr[-3000:]}"
    fmpi = run_fmpi(n, script, *args, timeout=timeout)
    assert fmpi.returncode == 0, f"under fmpirun:\n{fmpi.stderr[-3000:]}"
    return mpich, fmpi


@pytest.mark.parametrize("args", [(), ("--dill",)], ids=["pickle", "dill"])
def test_schwimmbad_mpipool_maps_over_the_workers(tmp_path, args):
    mpich, fmpi = _both(tmp_path, 3, "schwimmbad_map.py", *args, mpich_args=("--close-once",))
    assert fmpi.lines() == mpich.lines() and "results [1, 2, 5," in fmpi.stdout


def test_emcee_samples_the_same_chain(tmp_path):
    mpich, fmpi = _both(tmp_path, 3, "emcee_sampler.py", mpich_args=("--close-once",))
    assert fmpi.lines() == mpich.lines() and fmpi.stdout.startswith("chain (50, 16, 3)")


def test_zeus_chain_manager_samples_every_chain(tmp_path):
    mpich, fmpi = _both(tmp_path, 4, "zeus_chains.py")
    assert fmpi.sorted_lines() == mpich.sorted_lines() == [f"chain {r} (30, 8, 2) sampled" for r in (0, 1)]
    assert "Traceback" not in fmpi.stderr, fmpi.stderr  # (zeus stops its finalized workers at exit)


def test_mpipool_executor_with_dill(tmp_path):
    mpich, fmpi = _both(tmp_path, 3, "mpipool_executor.py")
    assert fmpi.lines() == mpich.lines() and "sum 506" in fmpi.stdout


def test_dask_mpi_cluster_computes(tmp_path):
    mpich, fmpi = _both(tmp_path, 4, "dask_cluster.py")
    assert fmpi.lines() == mpich.lines() == ["total 1045"]


def test_pytest_mpi_runs_the_marked_tests(tmp_path):
    shutil.copy(PROGRAMS / "pytest_mpi_suite.py", tmp_path / "test_marked.py")
    # `python -m pytest` on every rank: the "script" is pytest's module, run from a folder of its own
    # (-p no:warnings: pytest's own warnings, such as failing to remove another concurrent run's old temporary
    # folder, would add "1 warning" to one rank's summary line; CI saw it once in the slow stage)
    args = ("pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings", "--rootdir", str(tmp_path), "--with-mpi",
            str(tmp_path / "test_marked.py"))
    for run in (run_mpich(2, Path("-m"), *args), run_fmpi(2, Path("-m"), *args)):
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        summaries = [line.split(" in ")[0] for line in run.lines() if "passed" in line]  # (one per rank)
        assert summaries == ["3 passed, 1 skipped"] * 2, run.stdout
