"""``Request.waitsome/testsome`` (and ``Waitsome/Testsome``) fill the statuses of the requests they
complete, and ``Comm.recv`` warns that its ``buf`` argument is deprecated, as mpi4py does (issue 26):
the same output under fmpirun as under mpiexec with real mpi4py."""

import pytest

pytestmark = pytest.mark.timeout(300)

SOME = r"""
import warnings
from mpi4py import MPI

comm = MPI.COMM_SELF
for buf in (bytearray(0), 128, None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comm.recv(buf, MPI.PROC_NULL)
        comm.irecv(buf, MPI.PROC_NULL).wait()
    print(type(buf).__name__, [(w.category.__name__, str(w.message)) for w in caught])

comm = MPI.COMM_WORLD.Dup()
rank = comm.Get_rank()
reqs = [comm.irecv(source=rank, tag=i) for i in range(6)]
statuses = []
print("testsome-empty", MPI.Request.testsome(reqs, statuses), len(statuses))
for indexlist in ([5], [3, 1, 2], [0, 4]):
    for i in indexlist:
        comm.ssend(f"m{i}", dest=rank, tag=i)
    statuses = []
    some = MPI.Request.testsome if indexlist == [3, 1, 2] else MPI.Request.waitsome
    idxs, objs = some(reqs, statuses)
    print(sorted(idxs), sorted(objs), len(statuses), sorted(s.tag for s in statuses), [bool(r) for r in reqs])
print("after", MPI.Request.waitsome(reqs), MPI.Request.Testsome(reqs))
reqs = [comm.isend(i, dest=rank, tag=i) for i in range(3)]
for i in range(3):
    comm.recv(source=rank, tag=i)
statuses = [MPI.Status()]
print("Waitsome", sorted(MPI.Request.Waitsome(reqs, statuses)), len(statuses), MPI.Request.Waitsome(reqs))
"""


def test_some_and_recv_buf_warning_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: the statuses list stayed empty and recv(buf) did not warn."""
    path = program(SOME)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.lines() == ref.lines()
    assert len(ref.lines()) == 9
