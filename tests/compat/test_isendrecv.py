"""``Comm.Isendrecv`` and ``Isendrecv_replace`` (MPI 4.0; issue 26, mpi4py's test_p2p_buf): the data
each rank receives in a ring, through ``Wait``, ``Test`` and ``Waitall``, with PROC_NULL, compared with
MPICH + mpi4py. The statuses are not compared: MPICH 5.0.2 leaves an Isendrecv's status unset (its
tag and count are stale values), fmpi fills it with the receive's, as MPI specifies; they are
checked against the standard here instead.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

RING = r"""
import os, sys
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
r, n = comm.rank, comm.size
dest, source = (r + 1) % n, (r - 1) % n
out, statuses = [], []
for k in range(3):
    s = np.full(k + 2, r * 10 + k, "i")
    rb = np.full(k + 3, -1, "i")
    st = MPI.Status()
    req = comm.Isendrecv(s, dest, k, rb, source, MPI.ANY_TAG)
    req.Wait(st)
    out.append(("isr", k, rb.tolist(), bool(req), req == MPI.REQUEST_NULL))
    statuses.append((st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT)) == (source, k, k + 2))
buf = np.arange(4, dtype="d") + r
req = comm.Isendrecv_replace(buf, dest, 5, source, 5)
st = MPI.Status()
while not req.Test(st):
    pass
out.append(("replace", buf.tolist()))
statuses.append((st.Get_source(), st.Get_tag(), st.Get_count(MPI.DOUBLE)) == (source, 5, 4))
rb2 = np.zeros(1, "i")
reqs = [comm.Isendrecv(np.array([r], "i"), dest, 7, rb2, source, 7),
        comm.Isendrecv_replace(bytearray(b"xy"), MPI.PROC_NULL, 0, MPI.PROC_NULL, 0)]
MPI.Request.Waitall(reqs)
out.append(("waitall", rb2.tolist(), [bool(q) for q in reqs]))
comm.Isendrecv(None, MPI.PROC_NULL, 0, None, MPI.PROC_NULL, 0).Wait()
if "--statuses" in sys.argv:
    out.append(("statuses", statuses))
os.write(1, "".join(f"{r} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2])
def test_isendrecv_ring_as_under_mpich(program, fmpi, mpich, n):
    """Fails on the old code: Comm had no Isendrecv/Isendrecv_replace (AttributeError)."""
    path = program(RING)
    mine = fmpi(n, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(n, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
    statuses = fmpi(n, path, "--statuses")
    assert statuses.returncode == 0, statuses.stderr[-3000:]
    assert all(line.endswith("('statuses', [True, True, True, True])") for line in statuses.sorted_lines()
               if "statuses" in line) and "statuses" in statuses.stdout
