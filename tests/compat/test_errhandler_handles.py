"""Error-handler handles as in mpi4py (issue 26): ``Get_errhandler`` gives a new handle equal to the
handler, ``Free`` makes that handle ERRHANDLER_NULL (the predefined objects stay), ERRHANDLER_NULL is
false and cannot be freed or installed, predefined handlers pickle to themselves, ``Call_errhandler``
under ERRORS_RETURN returns — the same under fmpirun as under mpiexec."""

import pytest

pytestmark = pytest.mark.timeout(300)

HANDLERS = r"""
import pickle, sys
from mpi4py import MPI

def error(fn, *args):
    try:
        fn(*args)
        return "ok"
    except MPI.Exception as exc:
        return exc.Get_error_class() in (MPI.ERR_ERRHANDLER, MPI.ERR_ARG)

comm = MPI.COMM_SELF.Dup()
out = []
handles = [comm.Get_errhandler() for _ in range(3)]
out.append(("get", [h == MPI.ERRORS_RETURN for h in handles], handles[0] is handles[1], bool(handles[0])))
for h in handles:
    h.Free()
out.append(("freed", [h == MPI.ERRHANDLER_NULL for h in handles], bool(handles[0]), bool(MPI.ERRORS_RETURN)))
comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
eh = comm.Get_errhandler()
out.append(("set", eh == MPI.ERRORS_ARE_FATAL, eh != MPI.ERRORS_RETURN))
comm.Set_errhandler(MPI.ERRORS_RETURN)
comm.Call_errhandler(MPI.SUCCESS)
comm.Call_errhandler(MPI.ERR_OTHER)
out.append(("null", bool(MPI.ERRHANDLER_NULL), error(MPI.ERRHANDLER_NULL.Free),
            error(comm.Set_errhandler, MPI.ERRHANDLER_NULL), bool(MPI.Errhandler()), MPI.Errhandler() == MPI.ERRHANDLER_NULL))
out.append(("pickle", pickle.loads(pickle.dumps(MPI.ERRORS_RETURN)) is MPI.ERRORS_RETURN,
            pickle.loads(pickle.dumps(MPI.Errhandler(MPI.ERRORS_ARE_FATAL))) == MPI.ERRORS_ARE_FATAL,
            pickle.loads(pickle.dumps(MPI.Errhandler(MPI.ERRORS_ARE_FATAL))) is MPI.ERRORS_ARE_FATAL))
comm.Free()
sys.stdout.write("".join(f"{item!r}\n" for item in out))
"""


def test_errhandler_handles_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: Get_errhandler returned the predefined object itself, Free did nothing,
    ERRHANDLER_NULL was true, and there was no Call_errhandler."""
    path = program(HANDLERS)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.lines() == ref.lines()
    assert len(ref.lines()) == 5
