"""Collective roots as mpi4py takes them (issue 26): numpy integers, bools and floats (truncated) are
roots, strings and None are TypeErrors — the same under fmpirun as under mpiexec with real mpi4py.

mpi4py passes a root to a C ``int``; a program computing it as ``nprocs / 2`` hands over a float.
Both intra- and intercommunicator roots are checked, in object and buffer collectives.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

ROOTS = r"""
import os
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
r = comm.rank
out = []
for root in (0.0, np.int64(0), np.int32(1 % comm.size), 1.7, True):
    try:
        v = comm.bcast(("x", r), root=root)
        a = np.array([r], "i")
        comm.Bcast(a, root=root)
        g = comm.gather(r, root=root)
        b = np.zeros(comm.size, "i") if r == int(root) else None
        comm.Gather(np.array([r * 3], "i"), b, root=root)
        s = comm.scatter(list(range(comm.size)) if r == int(root) else None, root=root)
        red = comm.reduce(r, root=root)
        out.append((repr(root), v, int(a[0]), g, None if b is None else b.tolist(), s, red))
    except Exception as e:
        out.append((repr(root), type(e).__name__))
for root in ("0", None):
    try:
        comm.bcast(1, root=root)
        out.append((repr(root), "ok"))
    except Exception as e:
        out.append((repr(root), type(e).__name__))
os.write(1, f"{r} {out}\n".encode())  # one write: hydra interleaves the ranks' output at write boundaries

# An intercommunicator of the two ranks: a float local leader, and a float remote root.
inter = MPI.COMM_SELF.Create_intercomm(0.0, comm, 1 - r, 7)
root = MPI.ROOT if r == 0 else 0.0
a = np.array([10 + r], "i")
inter.Bcast(a, root=root)
got = (inter.bcast(("o", r), root=root), int(a[0]), inter.gather(r, root=root),
       inter.scatter([5] if r == 0 else None, root=root), inter.reduce(r + 1, root=root))
os.write(1, (" ".join([str(r), "inter", *map(str, got)]) + "\n").encode())
"""


def test_numeric_roots_behave_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: a float root reached the binomial trees (``float & int``: TypeError)
    and the intercommunicator's remote rank lookup (``tuple indices must be integers``)."""
    path = program(ROOTS)
    mine = fmpi(2, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(2, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
    assert len(mine.lines()) == 4
    assert "('1.7', ('x', 1), 1" in ref.stdout  # a float root is truncated, not refused, by mpi4py
