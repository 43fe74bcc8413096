"""docs/compatibility.md tells the truth about fmpi.MPI and about mpi4py (so the table cannot rot).

- a name marked supported or partial exists in fmpi.MPI (on the class, for a class section);
- a name marked not supported does not (adding it means updating the table);
- every public name of fmpi.MPI, and of its classes, is in the table;
- every name marked supported or partial exists in the real mpi4py (imported in a
  clean subprocess, so fmpi's mpi4py shim cannot answer instead), and fmpi-only
  names do not;
- the table is what docs/tools/compat_table.py generates from both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests_support import REPO, load_script

DOC = REPO / "docs" / "compatibility.md"

compat_table = load_script("docs/tools/compat_table.py", "compat_table")

# Where fmpi keeps the names of a section: mpi4py defines the collectives on Comm, fmpi on Intracomm,
# the class of every communicator it hands out.
FMPI_CLASS = {"Comm": "Intracomm"}
COMM_FAMILY = compat_table.COMM_FAMILY


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str], tuple[str, str]]:
    parsed = compat_table.parse(DOC.read_text())
    assert len(parsed) > 300, "the compatibility table looks truncated"
    return parsed


@pytest.fixture(scope="module")
def fmpi_mpi():
    from fmpi import MPI

    return MPI


@pytest.fixture(scope="module")
def real_mpi4py(table) -> dict[str, dict[str, bool]]:
    """{section: {name: exists in the real mpi4py}} for every name in the table."""
    wanted: dict[str, list[str]] = {}
    for section, name in table:
        wanted.setdefault(section, []).append(name)
    probe = r"""
import importlib.machinery, json, sys, mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
from mpi4py import MPI
wanted = json.loads(sys.argv[1])
# The real mpi4py.MPI is a compiled extension module named mpi4py.MPI (fmpi's shim hands out fmpi.MPI).
real = MPI.__name__ == "mpi4py.MPI" and MPI.__spec__.origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
out = {"__file__": MPI.__file__, "__real__": real}
for section, names in wanted.items():
    where = MPI if section == "MPI" else getattr(MPI, section)
    if section == "Comm":  # the collectives users call on an Intracomm are Comm's in mpi4py
        where = MPI.Intracomm
    out[section] = {n: hasattr(where, n) for n in names}
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(
        [sys.executable, "-I", "-c", probe, json.dumps(wanted)],
        cwd="/", env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    origin = result.pop("__file__")
    assert result.pop("__real__"), f"not the real mpi4py: {origin}"
    return result


def _where(fmpi_mpi, section: str):
    return fmpi_mpi if section == "MPI" else getattr(fmpi_mpi, FMPI_CLASS.get(section, section))


def test_statuses_follow_fmpi(table, fmpi_mpi):
    wrong = []
    for (section, name), (status, _) in table.items():
        has = hasattr(_where(fmpi_mpi, section), name)
        if status in ("supported", "partial", "fmpi only") and not has:
            wrong.append(f"{section}.{name} is marked {status}, but fmpi.MPI has no such name")
        if status == "not supported" and has:
            wrong.append(f"{section}.{name} is marked not supported, but fmpi.MPI has it (update the table)")
    assert not wrong, "\n".join(wrong)


def test_every_public_fmpi_name_is_in_the_table(table, fmpi_mpi):
    listed: dict[str, set[str]] = {}
    for section, name in table:
        listed.setdefault(section, set()).add(name)
    missing = [f"MPI.{n}" for n in dir(fmpi_mpi) if not n.startswith("_") and n not in listed["MPI"]]
    comm_names = set().union(*(listed.get(c, set()) for c in COMM_FAMILY))
    for section in compat_table.CLASSES:
        cls = getattr(fmpi_mpi, section)
        ours = {n for n in dir(cls) if not n.startswith("_")}
        if section == "Exception":
            ours = {n for n in ours if not hasattr(RuntimeError, n)}
        known = comm_names if section in COMM_FAMILY else listed.get(section, set())
        missing += [f"MPI.{section}.{n}" for n in sorted(ours - known)]
    assert not missing, "names of fmpi.MPI missing from docs/compatibility.md: " + ", ".join(missing)


def test_supported_names_exist_in_real_mpi4py(table, real_mpi4py):
    wrong = []
    for (section, name), (status, _) in table.items():
        exists = real_mpi4py[section][name]
        if status in ("supported", "partial", "not supported") and not exists:
            wrong.append(f"{section}.{name} is marked {status}, but mpi4py has no such name")
        if status == "fmpi only" and exists:
            wrong.append(f"{section}.{name} is marked fmpi only, but mpi4py has it")
    assert not wrong, "\n".join(wrong)


def test_partial_names_say_what_is_missing(table):
    bare = [f"{s}.{n}" for (s, n), (status, note) in table.items() if status == "partial" and not note]
    assert not bare, f"partial without a note: {bare}"


def test_table_is_what_the_generator_makes():
    text = DOC.read_text()
    fresh, _ = compat_table.refreshed(text)
    assert fresh == text, "docs/compatibility.md is out of date: run python docs/tools/compat_table.py"
