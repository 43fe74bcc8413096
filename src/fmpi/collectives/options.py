"""One options record per collective (as Gloo's ``AllreduceOptions``).

Every algorithm for a collective takes ``(channel, options)`` of the same
type, so ``table.py`` can swap algorithms freely. Buffers are flat: byte
``memoryview``s for collectives that only move data, 1-D numpy arrays for
reductions (the reduction needs the element type). Knobs that shape the
traffic (pipeline segment, in-flight window) are fields here, filled from the
table's tuning, so tests reach multi-segment paths with small data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# out = lower op higher, elementwise; `out` may be `lower`, `higher` or a third array.
# "lower" is always the contribution of the lower ranks, so non-commutative
# operations reduce in rank order and every rank combining the same operands
# gets the same bits.
Combine = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each rank's block lives in a byte buffer: offsets and lengths, in bytes."""

    offsets: Sequence[int]
    lengths: Sequence[int]
    # Every block is `block` bytes, block i at i * block (``even``): regions are then arithmetic.
    block: int | None = None

    @classmethod
    def even(cls, size: int, block: int) -> Layout:
        return cls([i * block for i in range(size)], [block] * size, block)

    @classmethod
    def packed(cls, lengths: Sequence[int]) -> Layout:
        offsets, pos = [], 0
        for n in lengths:
            offsets.append(pos)
            pos += n
        return cls(offsets, list(lengths))

    def view(self, buf: memoryview, i: int) -> memoryview:
        return buf[self.offsets[i] : self.offsets[i] + self.lengths[i]]

    def nbytes(self, lo: int, hi: int) -> int:
        return sum(self.lengths[lo:hi])

    def contiguous(self, lo: int, hi: int) -> bool:
        """Blocks lo..hi-1 follow each other in the buffer, in rank order."""
        return all(self.offsets[i] + self.lengths[i] == self.offsets[i + 1] for i in range(lo, hi - 1))

    def parts(self, buf: memoryview, lo: int, hi: int) -> list[memoryview]:
        """The bytes of blocks lo..hi-1, as few views as possible (one when contiguous)."""
        if hi - lo >= 1 and self.contiguous(lo, hi):
            return [buf[self.offsets[lo] : self.offsets[lo] + self.nbytes(lo, hi)]]
        return [self.view(buf, i) for i in range(lo, hi) if self.lengths[i]]


def segments(nbytes: int, segment: int, align: int = 1) -> list[tuple[int, int]]:
    """(start, stop) byte ranges of at most ~`segment` bytes covering 0..nbytes, cut at multiples of `align`."""
    if nbytes == 0:
        return []
    step = max(align, segment - segment % align)
    return [(start, min(start + step, nbytes)) for start in range(0, nbytes, step)]


# ------------------------------------------------------------- data movement
@dataclass(slots=True)
class BcastOptions:
    buf: memoryview  # root: the data; elsewhere: where it lands (same length everywhere)
    root: int
    segment: int


@dataclass(slots=True)
class GatherOptions:
    send: memoryview | None  # this rank's block; None at a root whose block is already in place
    recv: memoryview | None  # root only: every rank's block, placed by `layout`
    layout: Layout | None  # root only
    block: int  # bytes every rank sends (Gather), or -1 when they differ (Gatherv)
    root: int


@dataclass(slots=True)
class ScatterOptions:
    send: memoryview | None  # root only: every rank's block, placed by `layout`
    layout: Layout | None  # root only
    recv: memoryview | None  # this rank's block; None at a root that keeps its block in place
    block: int  # bytes every rank receives (Scatter), or -1 (Scatterv)
    root: int


@dataclass(slots=True)
class AllgatherOptions:
    buf: memoryview  # every rank's block, placed by `layout`; this rank's block already there
    layout: Layout
    segment: int


@dataclass(slots=True)
class AlltoallOptions:
    send: memoryview
    send_layout: Layout
    recv: memoryview
    recv_layout: Layout
    window: int  # pairwise-exchange steps in flight at once


# ----------------------------------------------------------------- reductions
@dataclass(slots=True)
class ReduceOptions:
    send: np.ndarray  # this rank's contribution (never written)
    recv: np.ndarray | None  # root only: the result (may be `send` itself: in place)
    combine: Combine
    commute: bool
    root: int
    segment: int


@dataclass(slots=True)
class AllreduceOptions:
    send: np.ndarray  # this rank's contribution; `recv` itself when in place
    recv: np.ndarray  # the result, the same bits on every rank
    combine: Combine
    commute: bool
    segment: int
    server_op: str | None = None  # the op's name for a server-side reduction (server_side.SERVER_OPS); None: it cannot

    def start_commutative(self, algorithm: str, size: int) -> bool:
        """Open an algorithm that splits the vector among ranks (commutative ops only): True when it
        has nothing left to do (one rank: the result is the input, copied into place)."""
        if not self.commute:
            raise ValueError(f"{algorithm} needs a commutative operation")
        if size > 1:
            return False
        if self.send is not self.recv:
            self.recv[...] = self.send
        return True


@dataclass(slots=True)
class ReduceScatterOptions:
    send: np.ndarray  # the whole vector this rank contributes (may be written when `scratch_ok`)
    recv: np.ndarray  # this rank's block of the result (counts[rank] elements)
    counts: Sequence[int]  # elements of the result each rank gets, in rank order
    combine: Combine
    commute: bool
    segment: int
    scratch_ok: bool = False  # `send` is this call's own memory and may serve as scratch


@dataclass(slots=True)
class ScanOptions:
    send: np.ndarray
    recv: np.ndarray  # inclusive: op over ranks 0..rank; exclusive: over 0..rank-1 (rank 0: untouched)
    combine: Combine
    exclusive: bool
