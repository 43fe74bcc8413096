"""The constants and names of mpi4py that fmpi had not (issue 26): every MPI error class, the
MPI-IO/RMA modes and kinds, the Fortran status indices, the string bounds, the topology kinds,
``BUFFER_AUTOMATIC``/``Iflush_buffer``, the sentinels' types, and the port/name-service calls (present:
a name service at the relay) — with MPICH's values, under fmpirun as under mpiexec.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

CONSTANTS = r"""
from mpi4py import MPI

prefixes = ("ERR_", "MODE_", "SEEK_", "WIN_", "LOCK_", "F_", "MAX_", "DISP")
names = sorted(n for n in dir(MPI) if n.startswith(prefixes) and isinstance(getattr(MPI, n), int) and n != "ERR_TIMEOUT")  # fmpi only
print(len(names), [(n, getattr(MPI, n)) for n in names])
print("topology", MPI.GRAPH, MPI.CART, MPI.DIST_GRAPH, "keyval", MPI.KEYVAL_INVALID)
print("types", type(MPI.IN_PLACE) is MPI.InPlaceType, type(MPI.BOTTOM) is MPI.BottomType,
      type(MPI.BUFFER_AUTOMATIC) is MPI.BufferAutomaticType)
MPI.Iflush_buffer().Wait() if MPI.Get_version() >= (4, 1) else None
print("error strings", [MPI.Exception(MPI.ERR_WIN).Get_error_class(), MPI.Exception(MPI.ERR_RMA_SYNC).Get_error_code()])
"""


def test_constants_match_mpich(program, fmpi, mpich):
    """Fails on the old code: ERR_WIN and 40 more error classes, MODE_*, SEEK_*, WIN_*, F_*, ...,
    BUFFER_AUTOMATIC and Open_port were missing (mpi4py's test_exceptions stopped at import), and
    CART/GRAPH and KEYVAL_INVALID had other numbers than MPICH's."""
    path = program(CONSTANTS)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.lines() == ref.lines()
    assert int(ref.lines()[0].split()[0]) > 100
    assert len(ref.lines()) == 4


def test_name_publishing_is_present(program, fmpi):
    """MPICH has a name service, and so has fmpi (the job's relay keeps it; tests/compat/test_name_publishing.py):
    the calls work, and the error classes of ERR_NAME / ERR_SERVICE are what they report."""
    mine = fmpi(1, program("""
        from mpi4py import MPI
        MPI.Publish_name("s", "p")
        print(MPI.Lookup_name("s"))
        MPI.Unpublish_name("s", "p")
        for call in (lambda: MPI.Unpublish_name("s", "p"), lambda: MPI.Lookup_name("s")):
            try:
                call()
            except MPI.Exception as exc:
                print(exc.Get_error_class() in (MPI.ERR_NAME, MPI.ERR_SERVICE))
    """))
    assert mine.returncode == 0, mine.stderr[-3000:]
    assert mine.lines() == ["p", "True", "True"]
