"""``memoryview(win)`` of an ``Win.Allocate`` window is its memory, as mpi4py's Win exports it, on Python 3.11
too, so mpi4py.util.sync's Mutex, Condition and Semaphore work (issue 26, mpi4py's test_util_sync: every one
of them failed with "memoryview: a bytes-like object is required, not 'Win'", and at N=2 a rank that failed
so skipped a barrier its peer then waited in for ever). Compared with MPICH + mpi4py."""

import pytest

pytestmark = pytest.mark.timeout(300)

SYNC = r"""
import os
from mpi4py import MPI
from mpi4py.util import sync

comm = MPI.COMM_WORLD
out = []
win = MPI.Win.Allocate(8, 1, comm=comm)
mem = memoryview(win)
out.append(("memoryview", mem.nbytes, mem.format, mem.readonly))  # (MPICH leaves the memory uninitialized)
win.Lock(comm.rank)
win.Put(bytearray(b"abcdefgh"), comm.rank)
win.Unlock(comm.rank)
out.append(("after put", bytes(memoryview(win)), bytes(win.tomemory())))
comm.Barrier()
win.Free()
mutex = sync.Mutex(comm=comm)
counter = sync.Counter(comm=comm)
with mutex:
    out.append(("locked", mutex.locked()))
    value = next(counter)
out.append(("unlocked", mutex.locked()))
comm.Barrier()
out.append(("counted", next(counter) >= comm.size))
cv = sync.Condition(comm=comm)
if comm.rank == 0:
    with cv:
        out.append(("notify none", cv.notify()))
comm.Barrier()
semaphore = sync.Semaphore(1, comm=comm)
with semaphore:
    out.append(("semaphore", True))
for obj in (semaphore, cv, counter, mutex):
    obj.free()
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2])
def test_allocated_window_exports_its_memory_as_under_mpich(as_under_mpich, n):
    """Fails on the old code (Python 3.11): ``memoryview(win)`` was a TypeError."""
    as_under_mpich(SYNC, n)
