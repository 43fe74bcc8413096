"""``Status.tomemory()`` (issue 26, mpi4py's test_status): the status's five C ints in MPICH's
``MPI_Status`` layout (count low word, count high bits with the cancelled flag, source, tag,
error), writable — writing them changes the status — and a status pickles to an equal one and can
be weakly referenced; compared with MPICH + mpi4py.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

MEMORY = r"""
import os, pickle, weakref
from mpi4py import MPI

s = MPI.Status(); s.source = 11; s.tag = 22; s.error = 33; s.Set_elements(MPI.BYTE, 7)
m = s.tomemory()
out = [("memory", type(m).__name__, len(m), list(m), m.nbytes, m.format, m.readonly)]
seq = list(m)
m[seq.index(11)] = 111; m[seq.index(22)] = 222; m[seq.index(33)] = 333
out.append(("written", s.source, s.tag, s.error, s.Get_count()))
m[0] = 9
s.Set_cancelled(True)
out.append(("count", s.Get_count(), s.Is_cancelled(), list(m), list(MPI.Status(s).tomemory())))
out.append(("pickle", pickle.loads(pickle.dumps(s)) == s, list(pickle.loads(pickle.dumps(s)).tomemory()),
            weakref.ref(s)() is s))
r = MPI.COMM_SELF.Isend(b"abc", 0, 5)
st = MPI.Status()
MPI.COMM_SELF.Recv(bytearray(3), 0, 5, st)
r.Wait()
out.append(("received", list(st.tomemory())[1:]))
os.write(1, "".join(f"{item!r}\n" for item in out).encode())
"""


def test_status_memory_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: Status had no tomemory (AttributeError)."""
    path = program(MEMORY)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
