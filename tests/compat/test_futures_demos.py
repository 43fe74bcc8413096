"""mpi4py's own futures demos (from its sdist, unmodified) under fmpirun and under MPICH's mpiexec print the same:
COMM_WORLD mode (``python -m mpi4py.futures``) at N = 3 and spawn mode (``MPIPoolExecutor(n)``) at N = 1."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests_support import fmpirun_argv

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "compat"))
import mpi4py_suite  # noqa: E402

DEMOS = ("run_cpi.py", "run_primes.py", "run_hello.py")

# (the first test of a worker also fetches mpi4py's sdist: seconds, or minutes where pip must build its metadata)
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    """demo/futures of the mpi4py sdist the suite runner downloads (cached)."""
    sdist = mpi4py_suite.ensure_sdist(mpi4py_suite.DEFAULT_CACHE)
    out = tmp_path_factory.mktemp("demos")
    prefix = f"mpi4py-{mpi4py_suite.MPI4PY_VERSION}/demo/futures/"
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if member.name.startswith(prefix) and member.name.endswith(DEMOS):
                (out / Path(member.name).name).write_bytes(tar.extractfile(member).read())
    return out


def _run(argv: list[str], cwd: Path, env: dict | None = None) -> list[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted(line.rstrip() for line in proc.stdout.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["comm_world", "spawn"])
@pytest.mark.parametrize("demo", DEMOS)
def test_futures_demo_prints_as_under_mpiexec(demo_dir, demo, mode):
    n, python = (3, [sys.executable, "-m", "mpi4py.futures"]) if mode == "comm_world" else (1, [sys.executable])
    ours = _run(fmpirun_argv("-n", str(n), *python, demo), demo_dir)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ref = _run([str(Path(sys.executable).parent / "mpiexec"), "-n", str(n), *python, demo], demo_dir, env)
    assert ours == ref
    assert ours
