"""``MPI.Status`` as an object, as in mpi4py (issue 26): the copy constructor, the ``count`` and
``cancelled`` setters, ``Set_cancelled``, comparison by fields (so unhashable) — the same under
fmpirun as under mpiexec."""

import pytest

pytestmark = pytest.mark.timeout(300)

STATUS = r"""
from mpi4py import MPI

s = MPI.Status()
s.source, s.tag, s.error = 1, 2, MPI.ERR_ARG
s.Set_elements(MPI.BYTE, 7)
s.Set_cancelled(True)
c = MPI.Status(s)
print("copy", c.source, c.tag, c.error == MPI.ERR_ARG, c.Get_count(MPI.BYTE), c.Get_elements(MPI.BYTE), c.Is_cancelled())
print("eq", c == s, MPI.Status() == MPI.Status(), c != MPI.Status())
c.count = 12
c.cancelled = False
print("set", c.count, c.Get_count(MPI.INT), c.cancelled, type(c.cancelled).__name__, s.count)
try:
    hash(s)
    print("hash", "ok")
except TypeError:
    print("hash", "TypeError")
try:
    MPI.Status(42)
    print("bad", "ok")
except TypeError:
    print("bad", "TypeError")
comm = MPI.COMM_SELF
req = comm.isend(b"abcd", 0, tag=5)  # (a blocking send to oneself may wait for the receive under MPICH)
st = MPI.Status()
comm.recv(source=0, tag=5, status=st)
req.wait()
print("recv", st.source, st.tag, MPI.Status(st) == st)
"""


def test_status_object_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: Status(status) was a TypeError, count/cancelled had no setter and
    there was no Set_cancelled; statuses compared by identity."""
    path = program(STATUS)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.lines() == ref.lines()
    assert len(ref.lines()) == 6
