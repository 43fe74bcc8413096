"""The memory of ``Win.Allocate_shared``: one file mapped by every rank of a communicator on one host.

Rank 0 creates the file (in ``/dev/shm`` where there is one; AWS Lambda has none, so its ``/tmp`` then), every
rank maps it, and the file's name is removed once all have: the mapping outlives it and nothing is left
behind when the ranks exit. Segments are contiguous in rank order, as MPICH lays them out by default, so
``Shared_query`` on one rank and a load or store on another reach the same bytes.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import uuid
from typing import Any

import numpy as np

from . import exceptions as err
from . import runtime


class WindowMemory(np.ndarray):
    """A window's memory where fmpi does not own it (``Win.Create``'s, a shared segment), as mpi4py's
    ``buffer`` over foreign memory: bytes (format "B") that ``m[:] = 0`` fills and ``Get_address`` locates."""

    format = "B"

    def __setitem__(self, key: Any, value: Any) -> None:
        # As mpi4py's buffer: ``mem[:] = struct.pack("i", 0)`` stores bytes (numpy would parse them as a number).
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = np.frombuffer(value, dtype=np.uint8)
        super().__setitem__(key, value)

    def __bool__(self) -> bool:
        return self.size > 0  # (as a bytes-like object: an empty one is false; numpy would refuse)

    @property
    def address(self) -> int:
        return int(self.ctypes.data) if self.size else 0

    @property
    def readonly(self) -> bool:
        return not self.flags.writeable

    @property
    def obj(self) -> object:
        return self.base

    def release(self) -> None:
        """Nothing to release: the window keeps the memory alive."""


def window_memory(view: memoryview) -> WindowMemory:
    return np.frombuffer(view, dtype=np.uint8).view(WindowMemory)


def _folder() -> str:
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def shared_segments(comm: Any, size: int) -> list[WindowMemory]:
    """Collective over `comm`: every rank's segment (this rank's of `size` bytes) of one shared mapping."""
    hosts = comm.allgather(runtime.node_id())
    sizes = comm.allgather(size)
    if len(set(hosts)) > 1:
        raise err.Exception(err.ERR_RMA_SHARED, "Win.Allocate_shared needs a communicator whose ranks share "
                            "memory (one host, or one Lambda function): split it with Split_type(COMM_TYPE_SHARED) first")
    total = sum(sizes)
    if total == 0:
        return [window_memory(memoryview(bytearray())) for _ in sizes]
    path = comm.bcast(os.path.join(_folder(), f"fmpi-win-{uuid.uuid4().hex}") if comm.Get_rank() == 0 else None)
    if comm.Get_rank() == 0:
        with open(path, "wb") as f:
            f.truncate(total)
    comm.Barrier()
    with open(path, "r+b") as f:
        mapping = mmap.mmap(f.fileno(), total)
    comm.Barrier()
    if comm.Get_rank() == 0:
        os.unlink(path)
    whole, out, start = memoryview(mapping), [], 0
    for n in sizes:
        out.append(window_memory(whole[start : start + n]))
        start += n
    return out
