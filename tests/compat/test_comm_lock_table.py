"""mpi4py's per-communicator lock table (issue 26): ``MPI._comm_lock_table(comm)`` holds a plain lock
for each object collective mpi4py serializes (bcast, gather, scatter, allgather, alltoall) once it has
run, and the lock pkl5's ``_commctx_intra`` takes — the same under fmpirun as under mpiexec."""

import pytest

pytestmark = pytest.mark.timeout(300)

LOCKS = r"""
import threading
from mpi4py import MPI
from mpi4py.util import pkl5

comm = MPI.COMM_WORLD.Dup()
table = MPI._comm_lock_table(comm)
print(sorted(table))
comm.bcast(1); comm.gather(1); comm.scatter([1] * comm.size); comm.allgather(1); comm.alltoall([1] * comm.size)
comm.reduce(1); comm.allreduce(1); comm.scan(1); comm.exscan(1); comm.barrier()
print(sorted(k for k in table if not k.startswith("@")), all(type(v) is type(threading.Lock()) for v in table.values()))
print(pkl5.Intracomm(comm).bcast("x"), MPI._comm_lock_table(comm) is table)
"""


def test_lock_table_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: there was no _comm_lock_table, and the object collectives took no lock."""
    path = program(LOCKS)
    mine = fmpi(2, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(2, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
    assert len(ref.lines()) == 6
