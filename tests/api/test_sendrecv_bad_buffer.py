"""A Sendrecv refused for its send buffer leaves nothing behind: the next Sendrecv gets its message
(it used to find a receive of the failed call still posted and hang; mpi4py's test_msgspec.testOrderC)."""

PROGRAM = """
from mpi4py import MPI
import numpy
try:
    MPI.COMM_SELF.Sendrecv(numpy.ones([3, 2])[:, 0], 0, recvbuf=numpy.zeros(3), source=0)
except BufferError as exc:
    print("refused", isinstance(exc, MPI.Exception))
b = numpy.zeros(6)
MPI.COMM_SELF.Sendrecv(numpy.arange(6.0), 0, recvbuf=b, source=0)
print(b.tolist())
"""


def test_refused_sendrecv_posts_no_receive(program, fmpi):
    run = fmpi(1, program(PROGRAM), timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.lines() == ["refused True", "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]"]
