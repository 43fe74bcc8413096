"""Private copies of sent messages (kept for resending until acknowledged), in buffers recycled per pair."""

from __future__ import annotations

POOL_MIN = 4096  # copies below this are plain bytes


class CopyPool:
    """Copy buffers by size (powers of two), holding at most `limit` bytes of free ones.

    Fresh allocations of these sizes are fresh pages from the kernel (page
    faults on every copy); recycling the buffers of acknowledged copies keeps
    a copy at memcpy speed.
    """

    __slots__ = ("_limit", "_free", "_pooled")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._free: dict[int, list[bytearray]] = {}
        self._pooled = 0

    def copy(self, parts: list[memoryview], nbytes: int) -> memoryview:
        """A private copy of a message of `nbytes` (at least POOL_MIN) made of `parts`."""
        size = 1 << (nbytes - 1).bit_length()
        free = self._free.get(size)
        if free:
            buf = free.pop()
            self._pooled -= size
        else:
            buf = bytearray(size)
        view = memoryview(buf)
        pos = 0
        for p in parts:
            view[pos : pos + len(p)] = p
            pos += len(p)
        return view[:nbytes]

    def recycle(self, view: memoryview) -> None:
        """The copy in `view` was acknowledged: keep its buffer for the next copy of its size."""
        buf = view.obj
        if isinstance(buf, bytearray) and self._pooled + len(buf) <= self._limit:
            self._free.setdefault(len(buf), []).append(buf)
            self._pooled += len(buf)
