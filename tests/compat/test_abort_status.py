"""``MPI._set_abort_status`` (issue 26): what mpi4py.run and mpi4py.futures call when a program ends on an
exception. As in mpi4py, a nonzero status set on one rank aborts the job with it when that rank's Python
exits, MPI still running; 0, or an ``MPI.Finalize`` before the exit, leaves the job to end normally.
The exit status and the ranks' output are compared with MPICH + mpi4py's.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

ABORT_STATUS = r"""import sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
print("rank", comm.rank, flush=True)
comm.Barrier()
if comm.rank == comm.size - 1:
    MPI._set_abort_status(int(sys.argv[1]))
if sys.argv[2] == "finalize":
    MPI.Finalize()
"""


@pytest.mark.parametrize(("status", "then", "n"), [("7", "exit", 2), ("0", "exit", 2), ("7", "finalize", 2), ("5", "exit", 1)])
def test_abort_status_at_exit_as_under_mpich(program, fmpi, mpich, status, then, n):
    """Fails on the old code: fmpi.MPI had no _set_abort_status (AttributeError, exit status 1)."""
    path = program(ABORT_STATUS)
    mine = fmpi(n, path, status, then)
    ref = mpich(n, path, status, then)
    assert mine.returncode == ref.returncode == (int(status) if then == "exit" else 0), (mine.stderr[-3000:], ref.stderr[-3000:])
    assert mine.sorted_lines() == ref.sorted_lines() == [f"rank {r}" for r in range(n)]
