"""What one invocation may change in the sandbox's process, set up before it and put back after it.

A warm sandbox serves the next invocation in the same process, so nothing of
one rank may leak into the next:

* ``RankEnvironment`` (around the whole rank, the join included): the
  event's environment (fmpirun's ``-x`` / ``--env`` and FMPI_* variables)
  and, for a tls:// relay with a private CA, ``FMPI_TLS_CA`` naming the
  event's certificate written to /tmp; the FMPI_* settings are read again
  on the way in and on the way out;
* ``ProgramState`` (around the program): ``sys.argv``, ``sys.path``, the
  working directory, ``sys.excepthook``, the environment; after it, fmpi's
  MPI state is reset and the program's modules are forgotten, so the next
  run imports them afresh.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

from .. import settings
from ..rank.shim_path import SHIM_DIR
from .event import MPI4PY_PYTHON_DIR, RankEvent

TLS_CA_VARIABLE = "FMPI_TLS_CA"


class RankEnvironment:
    """The event's environment variables (and its TLS CA) in ``os.environ`` while the rank runs."""

    def __init__(self, request: RankEvent) -> None:
        self.request = request
        self.saved: dict[str, str] = {}

    def __enter__(self) -> RankEnvironment:
        self.saved = dict(os.environ)
        os.environ.update(self.request.env)
        if self.request.tls_ca:
            os.environ[TLS_CA_VARIABLE] = write_ca(self.request.tls_ca)
        settings.reload()
        return self

    def __exit__(self, *exc: object) -> None:
        os.environ.clear()
        os.environ.update(self.saved)
        settings.reload()


def write_ca(pem: str) -> str:
    """The path of a file holding `pem` (in /tmp, the only writable place on Lambda), written once per content."""
    path = Path(tempfile.gettempdir()) / f"fmpi-ca-{hashlib.sha256(pem.encode()).hexdigest()[:16]}.pem"
    if not path.is_file():
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(pem)
        os.replace(tmp, path)
    return str(path)


class ProgramState:
    """Save what a program can change in this process, restore it after, and forget the program's modules."""

    def __init__(self, request: RankEvent, code_dir: Path) -> None:
        self.request = request
        self.code_dir = code_dir

    def __enter__(self) -> ProgramState:
        self.argv = sys.argv[:]
        self.path = sys.path[:]
        self.cwd = os.getcwd()
        self.environ = dict(os.environ)
        self.excepthook = sys.excepthook
        program = self.request.program
        first = str(self.code_dir)
        if program.script is not None:
            first = str((self.code_dir / program.script).parent)
        sys.argv = program.argv
        sys.path[0:0] = [first, SHIM_DIR] if first == str(self.code_dir) else [first, str(self.code_dir), SHIM_DIR]
        mpi4py_python = self.code_dir.parent / MPI4PY_PYTHON_DIR  # (after the shim: its MPI is fmpi's)
        if mpi4py_python.is_dir():
            sys.path.insert(sys.path.index(SHIM_DIR) + 1, str(mpi4py_python))
        if self.code_dir.is_dir():
            os.chdir(self.code_dir)
        return self

    def __exit__(self, *exc: object) -> None:
        from ..api import runtime

        runtime.reset_for_next_invocation()
        forget_modules(self.code_dir)
        sys.argv = self.argv
        sys.path[:] = self.path
        sys.excepthook = self.excepthook
        try:
            os.chdir(self.cwd)
        except OSError:
            pass
        os.environ.clear()
        os.environ.update(self.environ)


def forget_modules(code_dir: Path) -> None:
    """Drop the program's modules and the MPI facade (it caches COMM_WORLD), so the next run imports them afresh."""
    prefix = str(code_dir) + os.sep
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", []) or []), None)
        if name in ("fmpi.MPI", "mpi4py") or name.startswith("mpi4py.") or (where and str(where).startswith(prefix)):
            del sys.modules[name]
    fmpi_pkg = sys.modules.get("fmpi")
    if fmpi_pkg is not None and "MPI" in vars(fmpi_pkg):
        delattr(fmpi_pkg, "MPI")  # else `from fmpi import MPI` returns the stale module
