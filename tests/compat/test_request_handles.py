"""Request handles as mpi4py has them (issue 26, mpi4py's test_p2p_buf testConstructor, test_objmodel):
``MPI.Request(req)``, ``MPI.Prequest(preq)`` and ``MPI.Grequest(greq)`` are more handles on the same
request and compare equal to it (an inactive persistent request included); a request of another kind is
refused with TypeError unless it is null; ``handle``/``fromhandle``, ``toint``/``fromint`` and
``py2f``/``f2py`` lead back to the same request and are read-only. Compared with MPICH + mpi4py, except the
handle numbers themselves (MPICH's are its own).
"""

import pytest

pytestmark = pytest.mark.timeout(300)

HANDLES = r"""import os
from mpi4py import MPI
comm = MPI.COMM_WORLD
peer = (comm.rank + 1) % comm.size
source = (comm.rank - 1) % comm.size
out = []
preq = comm.Send_init(b"abc", peer, 5)
for kind in (MPI.Prequest, MPI.Request):
    dupe = kind(preq)
    out.append(("copy", kind.__name__, type(dupe).__name__, dupe == preq, bool(dupe), dupe != MPI.REQUEST_NULL))
for convert in ("fromhandle", "fromint", "f2py"):
    number = {"fromhandle": preq.handle, "fromint": preq.toint(), "f2py": preq.py2f()}[convert]
    dupe = getattr(MPI.Prequest, convert)(number)
    out.append(("convert", convert, type(dupe).__name__, dupe == preq, dupe.handle == preq.handle))
for bad in (MPI.Grequest, ):
    try:
        bad(preq)
        out.append(("refused", bad.__name__, "no"))
    except TypeError:
        out.append(("refused", bad.__name__, "TypeError"))
for value in (1234, "abc", MPI.INFO_NULL):
    try:
        MPI.Request(value)
        out.append(("not a request", type(value).__name__, "no"))
    except TypeError:
        out.append(("not a request", type(value).__name__, "TypeError"))
try:
    preq.handle = 5
    out.append(("read-only", "no"))
except AttributeError:
    out.append(("read-only", "AttributeError"))
buf = bytearray(3)
rreq = comm.Recv_init(buf, source, 5)
MPI.Prequest.Startall([preq, rreq])
active = MPI.Request(rreq)
out.append(("active copy", active == rreq, MPI.Request.fromhandle(rreq.handle) == rreq))
MPI.Request.Waitall([preq, rreq])
out.append(("done", bytes(buf), bool(preq), bool(rreq), preq == MPI.Prequest(preq)))
preq.Free(); rreq.Free()
out.append(("freed", preq == MPI.REQUEST_NULL, preq.handle == MPI.REQUEST_NULL.handle,
            MPI.Prequest.fromhandle(MPI.REQUEST_NULL.handle) == MPI.REQUEST_NULL))
for kind in (MPI.Request, MPI.Prequest, MPI.Grequest):
    null = kind(MPI.REQUEST_NULL)
    out.append(("null", kind.__name__, type(null).__name__, null == MPI.REQUEST_NULL, bool(null)))
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2])
def test_request_handles_as_under_mpich(as_under_mpich, n):
    """Fails on the old code: ``MPI.Prequest(preq)`` was a new, unequal request, and there was no
    ``fromhandle``."""
    as_under_mpich(HANDLES, n)
