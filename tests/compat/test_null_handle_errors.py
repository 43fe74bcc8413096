"""Null and predefined handles of groups, operations, requests and datatypes raise the MPI error
class MPICH raises (issue 26, mpi4py's test_exceptions): every call on GROUP_NULL is ERR_GROUP,
freeing OP_NULL or a predefined operation ERR_OP, freeing or cancelling REQUEST_NULL ERR_REQUEST,
a status asked for its count in DATATYPE_NULL ERR_TYPE; the lowercase ``free`` skips null and
predefined handles, and a freed user operation or request is null. Checked against MPICH + mpi4py.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

ERRORS = r"""
import os
from mpi4py import MPI

def code(fn, *args):
    try:
        fn(*args)
        return "ok"
    except MPI.Exception as e:
        return e.Get_error_class()
    except Exception as e:
        return type(e).__name__

g = MPI.GROUP_NULL
out = [("group-null", [code(getattr(g, m)) for m in ("Get_size", "Get_rank", "Dup", "Free")],
        code(g.Incl, []), code(g.Excl, []), code(g.Translate_ranks, [0], MPI.GROUP_EMPTY),
        code(MPI.Group.Compare, g, g), code(MPI.Group.Compare, MPI.GROUP_EMPTY, g),
        code(MPI.Group.Union, g, MPI.GROUP_EMPTY), code(MPI.Group.Difference, MPI.GROUP_EMPTY, g),
        code(g.free), code(MPI.GROUP_EMPTY.free), bool(MPI.GROUP_EMPTY))]
mine = MPI.COMM_WORLD.Get_group()
mine.free()
out.append(("group-free", bool(mine), mine == MPI.GROUP_NULL, code(mine.free)))
eh, info = MPI.COMM_SELF.Get_errhandler(), MPI.Info.Create()
out.append(("safe-free", code(MPI.ERRHANDLER_NULL.free), code(MPI.ERRORS_RETURN.free), bool(MPI.ERRORS_RETURN),
            code(MPI.INFO_NULL.free), code(MPI.INFO_ENV.free), bool(MPI.INFO_ENV), code(eh.free), bool(eh),
            code(eh.free), code(info.free), bool(info), code(info.free)))
out.append(("op-free", [code(op.Free) for op in (MPI.OP_NULL, MPI.SUM, MPI.MAXLOC, MPI.REPLACE, MPI.NO_OP)],
            code(MPI.OP_NULL.Is_commutative), bool(MPI.SUM), MPI.SUM != MPI.OP_NULL))
MPI.SUM.free()
user = MPI.Op.Create(lambda a, b, t: None)
out.append(("user-op", bool(user), user == MPI.OP_NULL, code(user.Free), bool(user), user == MPI.OP_NULL,
            code(user.Free), code(user.free), bool(MPI.SUM)))
out.append(("request-null", code(MPI.REQUEST_NULL.Free), code(MPI.REQUEST_NULL.Cancel),
            code(MPI.REQUEST_NULL.Wait), code(MPI.REQUEST_NULL.free)))
req = MPI.COMM_SELF.Isend((None, 0, MPI.BYTE), MPI.PROC_NULL)
out.append(("request", bool(req), code(req.Free), bool(req), req == MPI.REQUEST_NULL, code(req.Free), code(req.free)))
req = MPI.COMM_SELF.Send_init((None, 0, MPI.BYTE), MPI.PROC_NULL)
req.Start(); req.Wait()
out.append(("prequest", bool(req), code(req.Free), bool(req), code(req.Free)))
s = MPI.Status()
out.append(("status", code(s.Get_count, MPI.DATATYPE_NULL), code(s.Get_elements, MPI.DATATYPE_NULL),
            code(s.Set_elements, MPI.DATATYPE_NULL, 0), s.Get_count(MPI.INT), s.Get_elements(MPI.INT)))
clone = MPI.Datatype(MPI.INT)
clone.free(); was = bool(clone); clone.free()
MPI.INT.free()
dup = MPI.INT.Dup(); dup.free()
out.append(("type-free", was, clone == MPI.DATATYPE_NULL, bool(MPI.INT), MPI.INT.Get_size(), bool(dup), code(dup.free)))
os.write(1, "".join(f"{MPI.COMM_WORLD.rank} {item!r}\n" for item in out).encode())
"""


def test_null_handle_errors_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: GROUP_NULL.Get_size gave 0, OP_NULL.Free and REQUEST_NULL.Free did nothing,
    Status.Get_count(DATATYPE_NULL) gave 0."""
    path = program(ERRORS)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
