"""Buffers exported through DLPack (not the buffer protocol) work as under mpi4py + MPICH: the same
program prints the same under both. fmpi also takes an ``__array_interface__`` (mpi4py does not):
the same results through it."""

import pytest

pytestmark = pytest.mark.timeout(300)

PROGRAM = r"""
import sys
import numpy as np
from mpi4py import MPI

class DL:  # host memory exported through DLPack only
    def __init__(self, a): self.a = a
    def __dlpack__(self, stream=None): return self.a.__dlpack__()
    def __dlpack_device__(self): return self.a.__dlpack_device__()

class AI:  # ... or through the array interface only
    def __init__(self, a): self.a = a
    @property
    def __array_interface__(self): return self.a.__array_interface__

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
out = []
for wrap in [{"DL": DL, "AI": AI}[name] for name in sys.argv[1:]]:
    for dtype in ("i", "d", "D"):
        send, recv = np.arange(4, dtype=dtype) + rank, np.zeros(4, dtype=dtype)
        comm.Allreduce(wrap(send), wrap(recv), op=MPI.SUM)
        got = np.full(3, -1, dtype=dtype)
        comm.Sendrecv(wrap(send[:3]), (rank + 1) % size, recvbuf=wrap(got), source=(rank - 1) % size)
        out.append((wrap.__name__, dtype, recv.tolist(), got.tolist()))
out = comm.gather(out, root=0)
if rank == 0:
    for r, lines in enumerate(out):
        for line in lines:
            print(r, line[1:])
"""


def test_dlpack_and_array_interface_buffers_as_under_mpich(program, fmpi, mpich):
    path = program(PROGRAM)
    mine = fmpi(2, path, "DL")
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(2, path, "DL")
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.lines() == ref.lines()
    assert "0 ('i', [1, 3, 5, 7], [1, 2, 3])" in mine.lines()
    through_interface = fmpi(2, path, "AI")
    assert through_interface.returncode == 0, through_interface.stderr[-3000:]
    assert through_interface.lines() == mine.lines()
