"""User error classes, codes and strings (``Add_error_class``/``Add_error_code``/``Add_error_string``,
issue 26, mpi4py's test_errorcode) and ``MPI.Exception`` as a value (repr, hash, truth, comparisons
with ints and with each other), compared with MPICH + mpi4py: the same numbers (MPICH's encoding:
above ERR_LASTCODE, class index in the low byte, code index above it), the same LASTUSEDCODE
attribute, empty strings until one is added.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

CODES = r"""
import os
from mpi4py import MPI

attr = lambda: MPI.COMM_WORLD.Get_attr(MPI.LASTUSEDCODE)
out = [("start", MPI.ERR_LASTCODE, attr())]
c1 = MPI.Add_error_class()
out.append(("class", c1, c1 >= MPI.ERR_LASTCODE, attr() == c1, repr(MPI.Get_error_string(c1)), MPI.Get_error_class(c1)))
c2 = MPI.Add_error_class()
e1 = MPI.Add_error_code(c1)
e2 = MPI.Add_error_code(MPI.ERR_OTHER)
e3 = MPI.Add_error_code(c2)
out.append(("codes", c2, e1, e2, e3, attr(), [MPI.Get_error_class(e) for e in (e1, e2, e3)],
            [repr(MPI.Get_error_string(e)) for e in (e1, e2, e3)]))
MPI.Add_error_string(c1, "error class")
MPI.Add_error_string(e1, "error code 1")
MPI.Add_error_string(e1, "error code one")
out.append(("strings", MPI.Get_error_string(c1), MPI.Get_error_string(e1), repr(MPI.Get_error_string(e3))))
x = MPI.Exception(e1)
out.append(("exception", x.Get_error_class(), x.error_class, x.Get_error_code(), x.error_code,
            x.Get_error_string(), x.error_string, str(x), repr(x), int(x), hash(x) == hash(e1)))
ok, bad, last = MPI.Exception(MPI.SUCCESS), MPI.Exception(MPI.ERR_COMM), MPI.Exception(MPI.ERR_LASTCODE)
out.append(("values", bool(ok), bool(bad), repr(bad), bad == MPI.ERR_COMM, bad == bad, bad != MPI.ERR_COMM,
            ok < bad, ok <= bad <= last, bad > ok, bad >= MPI.ERR_COMM, last >= bad, bad < 3, hash(bad) == hash(5),
            repr(MPI.Exception(MPI.SUCCESS - 1)), MPI.Exception(MPI.ERR_LASTCODE + 1) == MPI.ERR_LASTCODE + 1,
            str(bad) == MPI.Get_error_string(MPI.ERR_COMM)))
os.write(1, "".join(f"{MPI.COMM_WORLD.rank} {item!r}\n" for item in out).encode())
"""


def test_user_error_codes_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: no Add_error_class (AttributeError), no Exception.error_string."""
    path = program(CODES)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
