"""src/fmpi/MPI.pyi: the typed stubs editors and mypy read are what docs/tools/mpi_stubs.py makes of fmpi.MPI,
and a type checker sees the API through them (good calls pass, wrong ones are reported)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests_support import REPO, load_script

mpi_stubs = load_script("docs/tools/mpi_stubs.py", "mpi_stubs")

GOOD = """
import numpy as np
from fmpi import MPI

comm = MPI.COMM_WORLD
rank: int = comm.Get_rank()
buf = np.zeros(4)
comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
total = comm.allreduce(rank)
comm.Isend([buf, MPI.DOUBLE], dest=0, tag=1).Wait()
sub = comm.Split(rank % 2, rank)
elapsed: float = MPI.Wtime() - MPI.Wtick()
dims: list[int] = MPI.Compute_dims(4, 2)
"""

BAD = """
from fmpi import MPI

comm = MPI.COMM_WORLD
comm.Get_rank(3)
MPI.Wtime("now")
comm.no_such_method()
count: str = MPI.COMM_WORLD.size
"""


def test_the_stubs_are_what_the_generator_makes_of_the_module():
    assert mpi_stubs.STUBS.read_text() == mpi_stubs.render(), "run: python docs/tools/mpi_stubs.py"


def test_every_public_name_of_the_module_is_in_the_stubs_once():
    from fmpi import MPI

    stubs = mpi_stubs.STUBS.read_text()
    for name in (n for n in dir(MPI) if not n.startswith("_")):
        declared = stubs.count(f" as {name},") + stubs.count(f" as {name}\n") + stubs.count(f"\n{name}: ")
        declared += stubs.count(f"\ndef {name}(") + stubs.count(f"\n{name} = ")
        assert declared == 1, name


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    program = tmp_path / "program.py"
    program.write_text(source)
    env = dict(os.environ, MYPYPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "cache"), str(program)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def test_mypy_sees_the_api_through_the_stubs(tmp_path):
    good = _mypy(tmp_path, GOOD)
    assert good.returncode == 0, good.stdout
    bad = _mypy(tmp_path, BAD)
    found = [line.split(": error: ")[1] for line in bad.stdout.splitlines() if ": error: " in line]
    assert found == [
        'Too many arguments for "Get_rank" of "Comm"  [call-arg]',
        'Too many arguments for "Wtime"  [call-arg]',
        '"Intracomm" has no attribute "no_such_method"  [attr-defined]',
        'Incompatible types in assignment (expression has type "int", variable has type "str")  [assignment]',
    ], bad.stdout


def test_the_module_names_every_predefined_datatype():
    from fmpi import MPI
    from fmpi.api.datatypes import DATATYPES

    assert {name for name in DATATYPES if getattr(MPI, name, None) is not DATATYPES[name]} == set()


def test_the_facade_imports_every_name_explicitly():
    import ast

    tree = ast.parse((REPO / "src" / "fmpi" / "MPI.py").read_text())
    stars = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.names[0].name == "*"]
    dynamic = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == "globals"]
    assert stars == [] and dynamic == []
