"""Programs' subclasses of the MPI classes, as mpi4py's test_subclass writes them (issue 26): a ``__new__``
that calls ``super().__new__(cls, obj)``, ``test``/``wait`` overridden to call ``Test``/``Wait`` without a
status, a subclass of ``MPI.Comm`` itself that Clones, Dups and Frees, ``Dup`` of an Info subclass of
that subclass. Compared with MPICH + mpi4py."""

import pytest

pytestmark = pytest.mark.timeout(300)

SUBCLASSES = r"""
import os
from mpi4py import MPI


class MyInfo(MPI.Info):
    def __new__(cls, info=None):
        return MPI.Info.__new__(cls, info)


class MyWin(MPI.Win):
    def __new__(cls, win=None):
        return MPI.Win.__new__(cls, win)


class MyRequest(MPI.Request):
    def __new__(cls, request=None):
        return super().__new__(cls, request)

    def test(self):
        return super(type(self), self).Test()

    def wait(self):
        return super(type(self), self).Wait()


class MyComm(MPI.Comm):
    def __new__(cls, comm=None):
        if comm is not None and comm != MPI.COMM_NULL:
            comm = comm.Clone()
        return super().__new__(cls, comm)


world = MPI.COMM_WORLD
out = []
info = MyInfo(MPI.Info.Create())
info.Set("key", "value")
dup = info.Dup()
out.append(("info", type(info).__name__, type(dup).__name__, dup.Get("key"), MyInfo() == MPI.INFO_NULL))
dup.Free()
info.Free()
win = MyWin(MPI.Win.Create(MPI.BOTTOM, comm=MPI.COMM_SELF))
out.append(("win", type(win).__name__, bool(win)))
win.Free()
request = MyRequest(world.Isend(b"", world.rank, 3))
world.Recv(bytearray(0), world.rank, 3)
out.append(("request", type(request).__name__, request.wait(), bool(request), request.test()))
for base in (MPI.COMM_SELF, world):
    comm = MyComm(base)
    clone = comm.Clone()
    out.append(("comm", type(comm).__name__, type(clone).__name__, comm.size == clone.size == base.size, comm != base))
    clone.Free()
    comm.Free()
    out.append(("freed", bool(clone), bool(comm), clone == MPI.COMM_NULL))
os.write(1, "".join(f"{world.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2])
def test_subclasses_as_under_mpich(as_under_mpich, n):
    """Fails on the old code: ``MPI.Info.__new__(cls, info)`` was a TypeError (object.__new__ takes no
    arguments), MyRequest's ``wait`` was called back with a status, and ``MPI.Comm`` had no Clone."""
    as_under_mpich(SUBCLASSES, n)
