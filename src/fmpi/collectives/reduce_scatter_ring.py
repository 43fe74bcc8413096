"""Ring reduce-scatter: N-1 steps; afterwards rank r holds block r of the result.

Block b starts at rank b+1 as that rank's own contribution and travels right
around the ring; each rank it passes folds its own contribution in
(``partial op own``), and after N-1 hops it stops, complete, at rank b. So
every block is combined exactly once, by one rank, in one fixed order: the
result's bits do not depend on timing, and an allgather afterwards hands
everyone the same bits. The order is the ring's, not rank order:
commutative operations only.

Pipelining: each block moves in segments. A segment is forwarded the moment
it has been folded, so step s+1 of segment k overlaps step s of segment k+1,
and the reduction of one segment overlaps the transfer of the next. Incoming
segments land in two scratch blocks used alternately, the receives of a step
posted a full step ahead, so nothing waits in the transport's unexpected
queue.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .channel import Channel, as_bytes
from .options import Combine, ReduceScatterOptions


def blocks_of(counts: Sequence[int]) -> list[tuple[int, int]]:
    out, pos = [], 0
    for n in counts:
        out.append((pos, pos + n))
        pos += n
    return out


def ring(
    ch: Channel,
    send: np.ndarray,
    acc: np.ndarray,
    blocks: Sequence[tuple[int, int]],
    combine: Combine,
    segment: int,
) -> None:
    """The ring pass. `send`: this rank's whole contribution (read only, unless it is `acc`).

    `acc`: where folded blocks are written; afterwards ``acc[blocks[rank]]``
    is the complete block of this rank. Other blocks of `acc` hold partial
    results, except block rank-1, which is never written.
    """
    size, rank = ch.size, ch.rank
    if size == 1:
        lo, hi = blocks[0]
        if acc is not send:
            acc[lo:hi] = send[lo:hi]
        return
    right, left = (rank + 1) % size, (rank - 1) % size
    per_segment = max(1, segment // max(1, send.itemsize))

    def pieces(b: int) -> list[tuple[int, int]]:
        lo, hi = blocks[b]
        return [(s, min(s + per_segment, hi)) for s in range(lo, hi, per_segment)]

    longest = max(hi - lo for lo, hi in blocks)
    scratch = [np.empty(longest, dtype=send.dtype) for _ in range(min(2, size - 1))]

    def post(step: int) -> list:
        """Receives of step `step` (block rank-step-2) into scratch[step % 2]."""
        b = (rank - step - 2) % size
        base = blocks[b][0]
        tmp = scratch[step % 2]
        return [(lo, hi, ch.irecv(left, as_bytes(tmp[lo - base : hi - base])), tmp[lo - base : hi - base]) for lo, hi in pieces(b)]

    posted = {0: post(0)}
    if size > 2:
        posted[1] = post(1)
    sends = [ch.isend(right, as_bytes(send[lo:hi])) for lo, hi in pieces((rank - 1) % size)]
    for step in range(size - 1):
        if step >= 1 and step + 1 < size - 1:
            posted[step + 1] = post(step + 1)  # its scratch held step-1, all folded by now
        forward = step < size - 2
        for lo, hi, op, tmp in posted.pop(step):
            ch.wait(op)
            combine(tmp, send[lo:hi], acc[lo:hi])
            if forward:
                sends.append(ch.isend(right, as_bytes(acc[lo:hi])))
    ch.waitall(sends)


def reduce_scatter(ch: Channel, opts: ReduceScatterOptions) -> None:
    if not opts.commute:
        raise ValueError("the ring reduce-scatter needs a commutative operation")
    blocks = blocks_of(opts.counts)
    acc = opts.send if opts.scratch_ok else np.empty_like(opts.send)
    ring(ch, opts.send, acc, blocks, opts.combine, opts.segment)
    lo, hi = blocks[ch.rank]
    if acc[lo:hi].ctypes.data != opts.recv.ctypes.data:
        np.copyto(opts.recv, acc[lo:hi])  # numpy copes with overlap (in-place Reduce_scatter)
