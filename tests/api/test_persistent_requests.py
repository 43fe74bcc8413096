"""Persistent requests (Send_init/Recv_init/Start/Startall) and the lowercase waitsome/testsome,
run as a halo-exchange loop under fmpirun and under real mpi4py + MPICH: same output."""

import pytest

pytestmark = pytest.mark.timeout(300)

HALO = r"""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
left, right = (rank - 1) % size, (rank + 1) % size
u = np.zeros(6)
u[1:-1] = rank
sends = [comm.Send_init([u[1:2], MPI.DOUBLE], left, 1), comm.Ssend_init([u[-2:-1], MPI.DOUBLE], right, 2)]
recvs = [comm.Recv_init([u[-1:], MPI.DOUBLE], right, 1), comm.Recv_init([u[0:1], MPI.DOUBLE], left, 2)]
out = [("inactive-wait", MPI.Request.Waitall(recvs), all(bool(r) for r in recvs))]
for step in range(4):
    MPI.Prequest.Startall(recvs + sends)
    statuses = [MPI.Status() for _ in range(4)]
    MPI.Request.Waitall(recvs + sends, statuses)
    out.append((step, float(u[0]), float(u[-1]), statuses[0].Get_source(), statuses[1].Get_source()))
    u[1:-1] += 10
for r in recvs + sends:
    r.Free()
out.append(("freed", [r == MPI.REQUEST_NULL for r in recvs + sends], bool(sends[0])))

reqs = [comm.isend(rank * 10 + i, right, tag=i) for i in range(3)]
got = {}
pending = [comm.irecv(source=left, tag=i) for i in range(3)]
while len(got) < 3:
    indices, values = MPI.Request.waitsome(pending)
    got.update(zip(indices, values))
MPI.Request.waitall(reqs)
out.append(("waitsome", sorted(got.items()), MPI.Request.testsome(pending)))
out = comm.gather(out, root=0)
if rank == 0:
    for r, lines in enumerate(out):
        for line in lines:
            print(r, repr(line))
"""


def test_persistent_halo_exchange_as_under_mpich(program, fmpi, mpich):
    path = program(HALO)
    mine = fmpi(3, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(3, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.lines() == ref.lines()
    assert "0 (3, 32.0, 31.0, 1, 2)" in mine.lines()
