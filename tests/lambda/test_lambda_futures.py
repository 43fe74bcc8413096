"""mpi4py.futures as a serverless pool on the Lambda backend (moto emulator), issue 26 item 3: mpi4py's own
Python modules, deployed from the mpi4py installed beside fmpirun, run against fmpi's MPI inside the functions.

* ``python -m mpi4py.futures prog.py`` (COMM_WORLD mode): rank 0 runs the program, the other functions
  are the pool's workers;
* ``MPICommExecutor(COMM_WORLD, root=0)`` in a plain program.
"""

from __future__ import annotations

from pathlib import Path

import pytest

POOL = '''
from mpi4py.futures import MPIPoolExecutor

if __name__ == "__main__":
    with MPIPoolExecutor() as pool:
        print("squares", list(pool.map(pow, range(8), [2] * 8)))
        print("workers", pool.num_workers)
'''

COMM_EXECUTOR = '''
from mpi4py import MPI
from mpi4py.futures import MPICommExecutor

with MPICommExecutor(MPI.COMM_WORLD, root=0) as executor:
    if executor is not None:
        print("cubes", list(executor.map(pow, range(6), [3] * 6)))
'''


@pytest.fixture(scope="module")
def code(tmp_path_factory) -> Path:
    """One code directory for both programs: one package, built once."""
    folder = tmp_path_factory.mktemp("futures")
    (folder / "squares.py").write_text(POOL)
    (folder / "cubes.py").write_text(COMM_EXECUTOR)
    return folder


def test_python_m_mpi4py_futures_runs_a_pool_of_lambda_functions(lambda_run, code: Path):
    run = lambda_run(3, "-m", "mpi4py.futures", "squares.py", extra=("--code", str(code)))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines() == ["squares [0, 1, 4, 9, 16, 25, 36, 49]", "workers 2"], run.stdout


def test_mpi_comm_executor_runs_on_lambda_functions(lambda_run, code: Path):
    run = lambda_run(3, code / "cubes.py")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines() == ["cubes [0, 1, 8, 27, 64, 125]"], run.stdout


def test_the_package_carries_mpi4pys_python_files_and_none_of_its_compiled_parts():
    from fmpi.launcher.lambda_backend.mpi4py_python import installed_mpi4py, mpi4py_python_files

    files = mpi4py_python_files(installed_mpi4py())
    assert "fmpi_mpi4py/mpi4py/futures/__init__.py" in files and "fmpi_mpi4py/mpi4py/util/pkl5.py" in files
    assert all(name.endswith(".py") for name in files)


def test_python_m_mpi4py_without_an_installed_mpi4py_is_refused_at_launch(monkeypatch, tmp_path: Path):
    import sys

    from fmpi.launcher.lambda_backend.options import UsageError, resolve_program

    monkeypatch.setattr(sys, "path", [str(tmp_path)])  # nowhere to find an mpi4py
    with pytest.raises(UsageError, match="pip install mpi4py"):
        resolve_program(["python", "-m", "mpi4py.futures", "prog.py"], str(tmp_path))
