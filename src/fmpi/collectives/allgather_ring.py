"""Ring allgather: N-1 steps, each rank sends to rank+1 and receives from rank-1.

In step s, rank r passes on block r-s (its own in step 0, then whatever it
received the step before). Every receive is posted up front, straight into
its final place in the buffer, and each block travels in segments that are
forwarded the moment they arrive, so the steps overlap instead of waiting
for whole blocks. Bandwidth-optimal: each rank sends and receives
(N-1)/N of the data once. Any N, any layout (Allgatherv).
"""

from __future__ import annotations

from collections.abc import Callable

from .channel import Channel
from .options import AllgatherOptions, Layout, segments


def ring(ch: Channel, buf: memoryview, layout: Layout, segment: int, block_of: Callable[[int], int] | None = None) -> None:
    """The ring pass; rank r starts out holding block ``block_of(r)`` (default: block r)."""
    size, rank = ch.size, ch.rank
    if size == 1:
        return
    right, left = (rank + 1) % size, (rank - 1) % size
    block_at = (lambda r: r) if block_of is None else block_of

    def pieces(b: int) -> list[memoryview]:
        view = layout.view(buf, b)
        return [view[lo:hi] for lo, hi in segments(len(view), segment)]

    steps = [pieces(block_at((rank - s - 1) % size)) for s in range(size - 1)]
    recvs = [[ch.irecv(left, piece) for piece in step] for step in steps]
    sends = [ch.isend(right, piece) for piece in pieces(block_at(rank))]
    for s in range(size - 1):
        forward = s < size - 2
        for piece, op in zip(steps[s], recvs[s]):
            ch.wait(op)
            if forward:
                sends.append(ch.isend(right, piece))
    ch.waitall(sends)


def allgather(ch: Channel, opts: AllgatherOptions) -> None:
    ring(ch, opts.buf, opts.layout, opts.segment)
