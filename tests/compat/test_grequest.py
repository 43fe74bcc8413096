"""``MPI.Grequest`` (issue 26, mpi4py's test_grequest): generalized requests started with query,
free and cancel callbacks (and their args/kwargs), cancelled, completed (also from another thread
while the main one waits), tested, waited on alone and in ``Waitall`` with other requests, freed
before completion; a callback's exception raised as ``MPI.Exception`` of its class (ERR_OTHER for a
Python one). Compared with MPICH + mpi4py, which keeps the query's source, tag and count in the
status but neither its error nor its cancelled flag.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

GREQUESTS = r"""import os, sys, threading, time
from mpi4py import MPI
out = []
log = []
def query(status, *a, **k):
    log.append(("query", a, k)); status.Set_source(3); status.Set_tag(7); status.Set_elements(MPI.INT, 2)
def free(*a, **k):
    log.append(("free", a, k))
def cancel(completed, *a, **k):
    log.append(("cancel", completed, a, k))
g = MPI.Grequest.Start(query, free, cancel, args=(1, 2), kwargs={"x": 3})
out.append(("start", type(g).__name__, bool(g), g.Test(), isinstance(g, MPI.Request)))
g.Cancel()
g.Complete()
g.Cancel()
st = MPI.Status()
out.append(("test", g.Test(st), st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT), st.Get_error(), st.Is_cancelled(), bool(g), g == MPI.REQUEST_NULL))
out.append(("log", log[:]))
log.clear()
# completion from another thread while waiting
g = MPI.Grequest.Start(query, free, None)
t = threading.Thread(target=lambda: (time.sleep(0.2), g.complete("v")))
t.start()
st = MPI.Status()
out.append(("wait-thread", g.wait(st), st.Get_source(), bool(g), log[:]))
t.join()
log.clear()
# Waitall with a normal request
g = MPI.Grequest.Start(None, free, None)
r = MPI.COMM_SELF.Isend(b"ab", 0, 3)
buf = bytearray(2)
r2 = MPI.COMM_SELF.Irecv(buf, 0, 3)
g.Complete()
sts = [MPI.Status() for _ in range(3)]
MPI.Request.Waitall([g, r, r2], sts)
out.append(("waitall", bytes(buf), [(s.Get_source(), s.Get_tag()) for s in sts], log[:]))
log.clear()
# free before complete
g = MPI.Grequest.Start(query, free, cancel)
g.Free()
out.append(("free-early", bool(g), log[:]))
g2 = MPI.Grequest.Start(lambda s: s.Set_cancelled(True))
g2.Complete()
st = MPI.Status()
g2.Wait(st)
out.append(("cancelled-by-query", st.Is_cancelled(), st.Get_source()))
g3 = MPI.Grequest.Start(lambda s: s.Set_error(MPI.ERR_TAG))
g3.Complete()
st = MPI.Status()
try:
    g3.Wait(st); out.append(("query-error", "ok", st.Get_error()))
except MPI.Exception as e:
    out.append(("query-error", e.Get_error_class(), st.Get_error()))
try:
    MPI.Grequest.Start(1)
except Exception as e:
    out.append(("bad", type(e).__name__))
def raise_mpi(*_):
    raise MPI.Exception(MPI.ERR_BUFFER)
def raise_other(*_):
    raise ValueError(42)
for fn in (raise_mpi, raise_other):
    for where in range(3):
        fns = [None, None, None]
        fns[where] = fn
        g = MPI.Grequest.Start(*fns)
        try:
            if where == 2:
                g.Cancel()
            g.Complete()
            g.Wait()
            out.append(("raise", fn.__name__, where, "ok"))
        except MPI.Exception as e:
            out.append(("raise", fn.__name__, where, e.Get_error_class(), bool(g)))
            if where == 2:
                g.Complete(); g.Wait()
os.write(1, "".join(f"{item!r}\n" for item in out).encode())
"""


def test_grequest_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: no MPI.Grequest (AttributeError)."""
    path = program(GREQUESTS)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
    assert mine.stderr.count("Traceback (most recent call last):") == ref.stderr.count("Traceback (most recent call last):") > 0
