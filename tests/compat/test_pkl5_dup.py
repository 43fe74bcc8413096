"""``Dup`` of a communicator of a program's subclass is of that subclass, as mpi4py's ``Dup`` returns
``type(self)``; and a request completed once is REQUEST_NULL, so waiting or testing it again gives None
(issue 26, mpi4py's test_util_pkl5: a plain Dup of a ``pkl5.Intracomm`` sent without pkl5's protocol
what ``pkl5.Message.probe`` then waited on for ever, and testMProbe read the value twice). Compared with
MPICH + mpi4py."""

import pytest

pytestmark = pytest.mark.timeout(300)

PKL5 = r"""
import os
from mpi4py import MPI
from mpi4py.util import pkl5

out = []
world = MPI.COMM_WORLD
for base in (MPI.COMM_SELF, world):
    comm = pkl5.Intracomm(base)
    dup = comm.Dup()
    out.append(("dup", type(dup).__module__.split(".")[-1], type(dup).__name__, dup.size == base.size))
    for big in (b"x", b"y" * 300_000):
        request = dup.issend(big, dup.rank, 123)
        status = MPI.Status()
        message = pkl5.Message.probe(dup, MPI.ANY_SOURCE, MPI.ANY_TAG, status)
        out.append(("probe", type(message).__name__, status.source == dup.rank, status.tag, message.recv() == big))
        request.wait()
    dup.Free()
comm = world.Dup()
send = comm.isend("hello", comm.rank, 7)
recv = comm.irecv(source=comm.rank, tag=7)
out.append(("first", recv.wait(), send.wait()))
status = MPI.Status()
out.append(("again", recv.wait(status), recv.test(), send.test(), status.source, status.tag, status.Get_count()))
comm.Free()
os.write(1, "".join(f"{world.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2])
def test_dup_of_a_subclass_and_completed_requests_as_under_mpich(program, fmpi, mpich, n):
    """Fails on the old code: the Dup was an ``MPI.Intracomm`` and the probe hung; the second wait gave "hello"."""
    path = program(PKL5)
    mine = fmpi(n, path, timeout=120)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(n, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
