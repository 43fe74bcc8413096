"""fmpirun keeps fmpi's own modules byte-compiled when Python would not (PYTHONDONTWRITEBYTECODE).

Otherwise every rank compiles all of fmpi from source at start-up. Runs a real
fmpirun from a copy of the package without any __pycache__.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import fmpi

FMPI_DIR = Path(fmpi.__file__).resolve().parent


def copy_without_cache(dest: Path) -> Path:
    shutil.copytree(FMPI_DIR, dest / "fmpi", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest / "fmpi"


def run_from(root: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m fmpi ...` with the fmpi under `root` (and nothing else from this checkout) on the path."""
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    full.update(PYTHONPATH=str(root), **env)
    return subprocess.run([sys.executable, "-m", "fmpi", *argv], capture_output=True, text=True, timeout=120, env=full, cwd=root)


def cached(package: Path) -> set[str]:
    return {p.relative_to(package).as_posix() for p in package.rglob("*.pyc")}


BARRIER = "from mpi4py import MPI; MPI.COMM_WORLD.barrier()"


def test_fmpirun_compiles_fmpi_once_when_python_writes_no_bytecode(tmp_path):
    package = copy_without_cache(tmp_path)
    result = run_from(tmp_path, "-n", "2", sys.executable, "-c", BARRIER,
                      PYTHONDONTWRITEBYTECODE="1")
    assert result.returncode == 0, result.stderr
    written = cached(package)
    tag = sys.implementation.cache_tag
    for module in ("transport/engine.py", "api/intracomm.py", "collectives/table.py", "rank/shim/mpi4py/MPI.py"):
        path = Path(module)
        assert f"{path.parent.as_posix()}/__pycache__/{path.stem}.{tag}.pyc" in written, sorted(written)[:20]
    # every module a rank imports now has its cache, so no rank compiles fmpi again
    probe = ("import sys, os, importlib.util, fmpi.MPI; "
             "print([n for n, m in list(sys.modules.items()) if n.startswith('fmpi') and getattr(m, '__file__', None) "
             "and not os.path.exists(importlib.util.cache_from_source(m.__file__))])")
    check = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"})
    assert check.stdout.strip() == "[]", check.stdout + check.stderr


def test_fmpirun_leaves_bytecode_to_python_otherwise(tmp_path):
    package = copy_without_cache(tmp_path)
    result = run_from(tmp_path, "-n", "2", sys.executable, "-c", BARRIER)
    assert result.returncode == 0, result.stderr
    # Python wrote what fmpirun and the rank imported, and only that: no whole-package compile
    written = cached(package)
    assert any(p.endswith(f"engine.{sys.implementation.cache_tag}.pyc") for p in written)
    assert not any("lambda_backend" in p for p in written), sorted(p for p in written if "lambda_backend" in p)
