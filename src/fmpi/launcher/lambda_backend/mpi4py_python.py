"""mpi4py's pure-Python modules for the deployment zip.

Under fmpirun, ``mpi4py.futures``, ``mpi4py.util`` and ``python -m mpi4py`` are mpi4py's own Python code,
loaded from an installed mpi4py against fmpi's ``MPI`` (``rank/shim``). A Lambda function has no mpi4py, so
the zip carries the ``.py`` files of the mpi4py installed where fmpirun runs (none of its compiled parts:
they would need an MPI library), under ``MPI4PY_PYTHON_DIR``, which the function puts on ``sys.path``
right after the shim.
"""

from __future__ import annotations

import sys
from importlib.machinery import PathFinder
from pathlib import Path

from ...lambda_runtime.event import MPI4PY_PYTHON_DIR
from ...rank.shim_path import SHIM_DIR


def installed_mpi4py() -> Path | None:
    """The directory of the mpi4py installed beside fmpi (found without importing it; not the shim), or None."""
    spec = PathFinder.find_spec("mpi4py", [p for p in sys.path if Path(p or ".").resolve() != Path(SHIM_DIR)])
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def mpi4py_python_files(root: Path | None) -> dict[str, Path]:
    """Zip path -> file, for every ``.py`` file of the mpi4py at `root` (none when `root` is None)."""
    if root is None:
        return {}
    return {
        f"{MPI4PY_PYTHON_DIR}/mpi4py/{path.relative_to(root).as_posix()}": path
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
    }
