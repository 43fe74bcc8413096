"""``MPI.Attach_buffer`` takes any writable buffer a message may be (issue 26, mpi4py's test_p2p_buf
runs its buffered sends over every array kind, DLPack ones included): bytearray, array.array,
``Alloc_mem`` memory and a DLPack object are attached, read-only bytes is a BufferError — as under
MPICH + mpi4py. (What ``Detach_buffer`` returns is not compared: MPICH gives a new object.)
"""

import pytest

pytestmark = pytest.mark.timeout(300)

ATTACH = r"""
import os, array
import numpy as np
from mpi4py import MPI

class DL:
    def __init__(self, a): self.a = a
    def __dlpack__(self, stream=None, **kw): return self.a.__dlpack__(**kw)
    def __dlpack_device__(self): return self.a.__dlpack_device__()

out = []
for buf in (bytearray(200), array.array("i", [0] * 50), MPI.Alloc_mem(200), DL(np.zeros(256, "b")), bytes(200)):
    try:
        MPI.Attach_buffer(buf)
        MPI.Detach_buffer()
        out.append((type(buf).__name__, "ok"))
    except BufferError:
        out.append((type(buf).__name__, "BufferError"))
    except Exception as e:
        out.append((type(buf).__name__, type(e).__name__))
os.write(1, "".join(f"{item!r}\n" for item in out).encode())
"""


def test_attach_buffer_kinds_as_under_mpich(program, fmpi, mpich):
    """Fails on the old code: a DLPack object was refused (memoryview: a bytes-like object is required)."""
    path = program(ATTACH)
    mine = fmpi(1, path)
    assert mine.returncode == 0, mine.stderr[-3000:]
    ref = mpich(1, path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert mine.sorted_lines() == ref.sorted_lines()
