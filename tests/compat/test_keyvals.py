"""User attributes on communicators, datatypes and windows (issue 26, mpi4py's test_attributes and the
``Get_attr(KEYVAL_INVALID)`` cases of test_exceptions): ``Create_keyval``/``Free_keyval``, ``Get_attr``/
``Set_attr``/``Delete_attr``, copy callbacks on ``Dup`` (True, a function, none), delete callbacks on
replace, delete and ``Free`` (the last set first), a callback's exception as ERR_OTHER, ERR_KEYVAL for a
keyval of the other kind, KEYVAL_INVALID or a predefined one, attributes shared by every handle on
COMM_WORLD and set on a predefined datatype — the same values, keyval numbers included, as MPICH +
mpi4py. (Not compared: an attribute whose keyval was freed, which crashes MPICH.)
"""

import pytest

pytestmark = pytest.mark.timeout(300)

KEYVALS = r"""import os
from mpi4py import MPI
out = []
def code(fn, *a):
    try:
        r = fn(*a); return ("ok", r)
    except MPI.Exception as e:
        return e.Get_error_class()
    except Exception as e:
        return type(e).__name__
k1 = MPI.Comm.Create_keyval(); k2 = MPI.Comm.Create_keyval(); kt = MPI.Datatype.Create_keyval()
out.append(("keyvals", k1, k2, kt, MPI.KEYVAL_INVALID))
c = MPI.COMM_WORLD.Dup()
out.append(("wrongkind", code(c.Get_attr, kt), code(c.Set_attr, kt, 1), code(MPI.INT.Get_attr, k1), code(c.Get_attr, MPI.KEYVAL_INVALID), code(c.Get_attr, 12345), code(c.Delete_attr, k1)))
log = []
def dfn(o, k, v):
    log.append(("del", v))
    if v == "bad": raise ValueError("bad")
kd = MPI.Comm.Create_keyval(None, dfn)
c.Set_attr(kd, "a"); c.Set_attr(kd, "b")
out.append(("reset", log[:], c.Get_attr(kd)))
bad = MPI.COMM_SELF.Dup()
bad.Set_attr(kd, "bad")
out.append(("delbad", code(bad.Delete_attr, kd), log[:]))
log.clear()
k3 = MPI.Comm.Create_keyval(None, dfn)
c.Set_attr(kd, "x"); c.Set_attr(k3, "y")
c.Free()
out.append(("free", log[:]))
log.clear()
t = MPI.INT.Dup()
kc = MPI.Datatype.Create_keyval(lambda o, k, v: v + 1)
t.Set_attr(kc, 1)
t2 = t.Dup()
out.append(("typedup", t2.Get_attr(kc), MPI.Datatype.Dup(t2).Get_attr(kc)))
kd1, kd2 = MPI.Datatype.Create_keyval(None, dfn), MPI.Datatype.Create_keyval(None, dfn)
t3 = MPI.INT.Dup(); t3.Set_attr(kd2, "first"); t3.Set_attr(kd1, "second"); t3.Free()
out.append(("typefree", log[:]))
log.clear()
def cfail(o, k, v): raise ValueError
kf = MPI.Comm.Create_keyval(cfail)
c = MPI.COMM_SELF.Dup(); c.Set_attr(kf, 1)
out.append(("copyfail", code(c.Dup)))
out.append(("predef", code(MPI.COMM_WORLD.Set_attr, MPI.TAG_UB, 5), code(MPI.COMM_WORLD.Delete_attr, MPI.TAG_UB)))
kw = MPI.Comm.Create_keyval()
MPI.COMM_WORLD.Set_attr(kw, "w")
out.append(("world", MPI.COMM_WORLD.Get_attr(kw), MPI.COMM_WORLD.Dup().Get_attr(kw), MPI.Comm(MPI.COMM_WORLD).Get_attr(kw)))
MPI.INT.Set_attr(kc, 10)
out.append(("predeftype", MPI.INT.Get_attr(kc), MPI.INT.Dup().Get_attr(kc)))
kt2 = MPI.Datatype.Create_keyval(None, None)
out.append(("nulls", code(MPI.COMM_NULL.Get_attr, kw), code(MPI.DATATYPE_NULL.Get_attr, kt2), code(MPI.Comm.Free_keyval, MPI.KEYVAL_INVALID)))
os.write(1, "".join(f"{item!r}\n" for item in out).encode())
"""


def test_keyvals_and_attributes_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: no Create_keyval (AttributeError)."""
    path = program(KEYVALS)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
    assert "ValueError" in mine.stderr


WIN_KEYVALS = r"""import os
from mpi4py import MPI
out = []
def code(fn, *a):
    try:
        r = fn(*a); return ("ok", r)
    except MPI.Exception as e:
        return e.Get_error_class()
    except Exception as e:
        return type(e).__name__
log = []
def dfn(o, k, v):
    log.append(("del", type(o).__name__, v))
kw = MPI.Win.Create_keyval(None, dfn); kc = MPI.Comm.Create_keyval()
out.append(("keyvals", kw, kc))
win = MPI.Win.Create(MPI.BOTTOM, 1, MPI.INFO_NULL, MPI.COMM_SELF)
out.append(("unset", win.Get_attr(kw), win.Get_attr(MPI.WIN_SIZE), win.Get_attr(MPI.WIN_DISP_UNIT)))
win.Set_attr(kw, "a"); win.Set_attr(kw, "b")
out.append(("reset", log[:], win.Get_attr(kw)))
out.append(("wrongkind", code(win.Get_attr, kc), code(win.Set_attr, kc, 1), code(MPI.COMM_WORLD.Get_attr, kw),
            code(win.Get_attr, MPI.KEYVAL_INVALID)))
win.Delete_attr(kw)
out.append(("deleted", log[:], win.Get_attr(kw)))
inner = MPI.Win.Create(MPI.BOTTOM, 1, MPI.INFO_NULL, MPI.COMM_SELF)
kf = MPI.Win.Create_keyval(delete_fn=lambda o, k, v: v.Free())
win.Set_attr(kf, inner); win.Delete_attr(kf)
out.append(("freed by delete_fn", inner == MPI.WIN_NULL))
log.clear()
k2 = MPI.Win.Create_keyval(None, dfn)
win.Set_attr(kw, "x"); win.Set_attr(k2, "y")
win.Free()
out.append(("free", log[:]))
out.append(("null", code(MPI.WIN_NULL.Get_attr, kw), code(MPI.WIN_NULL.Set_attr, kw, 1), MPI.Win.Free_keyval(kw)))
os.write(1, "".join(f"{item!r}\n" for item in out).encode())
"""


def test_window_keyvals_and_attributes_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: no Win.Create_keyval (AttributeError), so mpi4py's test_attributes did not import."""
    path = program(WIN_KEYVALS)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
