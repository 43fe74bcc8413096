"""User-defined error handlers (issue 26, mpi4py's test_errhandler): ``Comm.Create_errhandler`` and
``Win.Create_errhandler``, set, got back (equal, a new handle), called by ``Call_errhandler`` with SUCCESS
too, as MPICH calls them, and given the object; a communicator's handler refused by a window (ERR_ARG); at most 32
live handlers of a kind (RuntimeError); not picklable; ``fromint(toint())`` equal. ``Win.Call_errhandler``
under ERRORS_RETURN returns, as under MPICH. Compared with MPICH + mpi4py line for line, at N = 1 and 2.
"""

import pytest

from tests_support import OUTCOMES_PRELUDE

pytestmark = pytest.mark.timeout(300)

ERRHANDLERS = OUTCOMES_PRELUDE + r"""
calls = []
def handler(obj, code):
    calls.append((type(obj).__name__, obj == target, MPI.Get_error_class(code)))

def error_class(call):
    try:
        call()
        return "ok"
    except MPI.Exception as e:
        return MPI.Get_error_class(e.Get_error_code())

def exercise(kind, obj, other):
    global target
    target = obj
    eh = kind.Create_errhandler(handler)
    out.append((kind.__name__, "made", bool(eh), eh == MPI.Errhandler(eh), type(eh).fromint(eh.toint()) == eh))
    outcome((kind.__name__, "pickle"), eh.__reduce__)
    # 32 live handlers of a kind at most (mpi4py never gives a slot back: these are the kind's last ones)
    many = [kind.Create_errhandler(handler) for _ in range(31)]
    outcome((kind.__name__, "33rd"), lambda: kind.Create_errhandler(handler))
    for e in many:
        e.Free()
    # MPICH: a window refuses a communicator's handler (ERR_ARG), a communicator takes a window's
    out.append((kind.__name__, "other kind", error_class(lambda: other.Set_errhandler(eh))))
    other.Set_errhandler(MPI.ERRORS_RETURN)
    before = obj.Get_errhandler()
    obj.Set_errhandler(eh)
    got = obj.Get_errhandler()
    out.append((kind.__name__, "got", got == eh, got is eh, got != before))
    got.Free()
    obj.Call_errhandler(MPI.SUCCESS)
    obj.Call_errhandler(MPI.ERR_OTHER)
    out.append((kind.__name__, "called", calls[:]))
    calls.clear()
    eh.Free()
    out.append((kind.__name__, "freed", bool(eh), obj.Get_errhandler() == before))
    obj.Call_errhandler(MPI.ERR_ARG)  # the object keeps the handler after the user frees theirs
    out.append((kind.__name__, "still", calls[:]))
    calls.clear()
    obj.Set_errhandler(before)
    out.append((kind.__name__, "return", error_class(lambda: obj.Call_errhandler(MPI.ERR_OTHER))))

win = MPI.Win.Create(MPI.BOTTOM, 1, MPI.INFO_NULL, MPI.COMM_SELF)
dup = comm.Dup()
exercise(MPI.Comm, dup, win)
exercise(MPI.Win, win, dup)
win.Free()
dup.Free()
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2])
def test_user_errhandlers_as_under_mpich(as_under_mpich, n):
    """Fails on the old code: Comm.Create_errhandler raised NotImplementedError, Win had none."""
    as_under_mpich(ERRHANDLERS, n)
