"""The fault-tolerance calls (ULFM: Agree, Iagree, Shrink, Ishrink, Get_failed, Ack_failed, Is_revoked,
Revoke) as MPICH + mpi4py has them without fault tolerance (issue 26, mpi4py's test_ulfm): the AND of
every member's flag (the remote group's on an intercommunicator), a duplicate for Shrink, nothing failed, and
NotImplementedError for Revoke; the same argument errors. Compared with MPICH + mpi4py line for line.
"""

import pytest

pytestmark = pytest.mark.timeout(300)

ULFM = r"""import os
from mpi4py import MPI
world = MPI.COMM_WORLD
out = []


def attempt(label, call):
    try:
        out.append((label, call()))
    except Exception as exc:  # the kind of error is what is compared
        out.append((label, type(exc).__name__))


def check(comm, name):
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    me = comm.Get_rank()
    out.append((name, "agree", comm.Agree(0b1111 if me % 2 else 0b1011 ^ (me & 1)), comm.Agree(-1), comm.Agree(True)))
    out.append((name, "agree by rank", comm.Agree(1 << (me % 3))))
    flag = memoryview(MPI.buffer.allocate(4)).cast("i")
    flag[0] = 0b1101 if me else 0b0111
    request = comm.Iagree(flag)
    request.Wait()
    out.append((name, "iagree", flag[0], bool(request)))
    for value in (0, bytearray(4), bytes(4), "x"):
        attempt((name, "iagree", type(value).__name__), lambda: comm.Iagree(value))
    for value in (1.5, "x", 1 << 40):
        attempt((name, "agree", type(value).__name__), lambda: comm.Agree(value))
    shrunk = comm.Shrink()
    out.append((name, "shrink", type(shrunk).__name__, shrunk.Get_size() == comm.Get_size(),
                shrunk.Get_rank() == me, MPI.Comm.Compare(shrunk, comm)))
    shrunk.Barrier()
    shrunk.Free()
    shrunk, request = comm.Ishrink()
    before = bool(request)
    request.Wait()
    out.append((name, "ishrink", type(shrunk).__name__, before, bool(request), MPI.Comm.Compare(shrunk, comm)))
    shrunk.Free()
    failed = comm.Get_failed()
    out.append((name, "failed", failed.Get_size(), MPI.Group.Compare(failed, MPI.GROUP_EMPTY) != MPI.UNEQUAL))
    out.append((name, "ack", comm.Ack_failed(), comm.Ack_failed(0), comm.Ack_failed(comm.Get_size())))
    out.append((name, "revoked", comm.Is_revoked()))
    attempt((name, "revoke"), comm.Revoke)
    out.append((name, "still works", comm.Agree(1)))


check(world.Dup(), "world")
check(MPI.COMM_SELF.Dup(), "self")
if world.Get_size() > 1:
    half = world.Get_rank() < world.Get_size() // 2
    local = world.Split(int(half), 0)
    inter = local.Create_intercomm(0, world, world.Get_size() // 2 if half else 0)
    check(inter, "inter")
for call in ("Agree", "Shrink", "Get_failed", "Is_revoked"):
    args = (1,) if call == "Agree" else ()
    attempt(("null", call), lambda: getattr(MPI.COMM_NULL, call)(*args))
os.write(1, "".join(f"{world.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2, 3])
def test_fault_tolerance_calls_as_under_mpich(as_under_mpich, n):
    """Fails on the old code: fmpi's communicators had none of these calls (AttributeError)."""
    as_under_mpich(ULFM, n)
