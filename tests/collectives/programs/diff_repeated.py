"""Differential: Allreduce called again and again with the same arrays, as an iterative program does,
with whatever can change between two such calls (fmpi reuses the last call's plan: api/repeated_calls.py)."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
_out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def out(name, arr):
    print(f"{rank} {name} {np.asarray(arr).tolist()!r}", file=_out)


def attempt(name, fn):
    """A call that may fail: which of Python's error classes it raised, as mpi4py's does."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        kind = next(k for k in (BufferError, ValueError, TypeError, Exception) if isinstance(exc, k))
        print(f"{rank} {name} raised {kind.__name__}", file=_out)


send = np.zeros(4)
recv = np.zeros(4)
for i in range(5):  # the same arrays, new values: every result must be this call's
    send[:] = np.arange(4) * (rank + 1) + i
    comm.Allreduce(send, recv, MPI.SUM)
    out(f"loop-{i}", recv)

for name in ("MAX", "MIN", "PROD", "SUM"):  # the same arrays, another op
    comm.Allreduce(send, recv, getattr(MPI, name))
    out(f"op-{name}", recv)

for i in range(3):  # in place, repeatedly
    recv[:] = rank + i
    comm.Allreduce(MPI.IN_PLACE, recv, MPI.SUM)
    out(f"in-place-{i}", recv)

recv.shape = (2, 2)  # the same objects, reshaped
send.shape = (2, 2)
comm.Allreduce(send, recv, MPI.SUM)
out("reshaped", recv)

floats = np.arange(4.0) * (rank + 1) + 0.25
total = np.zeros(4)
comm.Allreduce(floats, total, MPI.SUM)
out("floats", total)
floats.dtype = "i4"  # the same objects, reinterpreted: the sum of their bits as int32 is another matter
total.dtype = "i4"
comm.Allreduce(floats, total, MPI.SUM)
out("floats-as-i4", total)

big_send = np.arange(20000, dtype="f8") + rank  # above the remembered size, between two small calls
big_recv = np.zeros(20000)
comm.Allreduce(send, recv, MPI.SUM)
comm.Allreduce(big_send, big_recv, MPI.SUM)
comm.Allreduce(send, recv, MPI.SUM)
out("small-big-small", recv)
out("big", [big_recv.sum()])

other_send, other_recv = np.ones(3) * rank, np.zeros(3)
for i in range(3):  # two pairs of arrays, alternately
    comm.Allreduce(send, recv, MPI.SUM)
    comm.Allreduce(other_send, other_recv, MPI.MAX)
    out(f"alternate-{i}", recv)
    out(f"alternate-other-{i}", other_recv)

concat = MPI.Op.Create(lambda a, b, dt: np.copyto(np.frombuffer(b, "f8"), np.frombuffer(a, "f8") * 10 + np.frombuffer(b, "f8")), commute=False)
x, r = np.array([float(rank + 1)]), np.zeros(1)
for i in range(3):  # a non-commutative user op, repeated: rank order each time
    comm.Allreduce(x, r, concat)
    out(f"user-op-{i}", r)
concat.Free()

recv.flags.writeable = False  # the same objects, but the result can no longer be written
attempt("read-only", lambda: comm.Allreduce(send, recv, MPI.SUM))
recv.flags.writeable = True
comm.Allreduce(send, recv, MPI.SUM)
out("writable-again", recv)
_out.close()
