"""Recursive-doubling allgather: log2(N) exchanges of doubling size, any N.

With N a power of two, in round k rank r swaps everything it holds with rank
r xor 2^k. Other N use MPICH's fold-in: of the first 2*rem ranks (rem = N
minus the largest power of two below it) each even one hands its block to its
odd neighbour and waits, the others run the power-of-two rounds on the blocks
of one or two ranks each, and the odd ones finally hand everything back.
Two extra messages for those pairs, still about log2(N) rounds in all: the
small-message algorithm. Blocks land in place when their region of the
buffer is contiguous (always, for Allgather); otherwise via a scratch copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .blobs import Blob, pack, unpack
from .channel import Channel
from .options import AllgatherOptions, Layout
from .ranks import fold, real_rank, real_span


def _region(layout: Layout, indices: Sequence[int]) -> tuple[int, int] | None:
    """(start, stop) of the blocks' bytes when they follow each other in the buffer, else None."""
    block = layout.block
    if block is not None and indices.__class__ is range and indices.step == 1:  # (Allgather: every call, every round)
        return indices.start * block, indices.stop * block  # type: ignore[attr-defined]
    filled = [i for i in indices if layout.lengths[i]]
    if not filled:
        return 0, 0
    for a, b in zip(filled, filled[1:]):
        if layout.offsets[a] + layout.lengths[a] != layout.offsets[b]:
            return None
    return layout.offsets[filled[0]], layout.offsets[filled[-1]] + layout.lengths[filled[-1]]


def _parts(buf: memoryview, layout: Layout, indices: Sequence[int]) -> list[memoryview]:
    region = _region(layout, indices)
    if region is not None:
        return [buf[region[0] : region[1]]]
    return [layout.view(buf, i) for i in indices if layout.lengths[i]]


def _target(buf: memoryview, layout: Layout, indices: Sequence[int]) -> tuple[memoryview, Callable[[], None] | None]:
    """Where to receive the blocks `indices`: (their region of `buf`, None) when it is contiguous,
    else (a scratch buffer, the function that copies it into place after the receive)."""
    region = _region(layout, indices)
    if region is not None:
        return buf[region[0] : region[1]], None
    scratch = memoryview(bytearray(sum(layout.lengths[i] for i in indices)))

    def finish() -> None:
        pos = 0
        for i in indices:
            n = layout.lengths[i]
            layout.view(buf, i)[:] = scratch[pos : pos + n]
            pos += n

    return scratch, finish


def _receive(ch: Channel, src: int, buf: memoryview, layout: Layout, indices: Sequence[int]) -> None:
    target, finish = _target(buf, layout, indices)
    ch.recv(src, target)
    if finish is not None:
        finish()


def _exchange(ch: Channel, peer: int, buf: memoryview, layout: Layout, give: Sequence[int], take: Sequence[int]) -> None:
    target, finish = _target(buf, layout, take)
    ch.sendrecv(peer, _parts(buf, layout, give), peer, target)  # (the transport's exchange step)
    if finish is not None:
        finish()


def allgather(ch: Channel, opts: AllgatherOptions) -> None:
    size, rank = ch.size, ch.rank
    if size == 1:
        return
    buf, layout = opts.buf, opts.layout
    pof2, rem, newrank = fold(rank, size)
    if rank < 2 * rem:
        if rank % 2 == 0:
            ch.send(rank + 1, *_parts(buf, layout, [rank]))
        else:
            _receive(ch, rank - 1, buf, layout, [rank - 1])
    if newrank >= 0:
        mask = 1
        while mask < pof2:
            partner = newrank ^ mask
            lo, their_lo = newrank & ~(mask - 1), partner & ~(mask - 1)
            if rem:
                mine = range(*real_span(lo, lo + mask, rem))
                theirs = range(*real_span(their_lo, their_lo + mask, rem))
                partner = real_rank(partner, rem)
            else:  # (a power of two: new ranks are the ranks)
                mine, theirs = range(lo, lo + mask), range(their_lo, their_lo + mask)
            _exchange(ch, partner, buf, layout, mine, theirs)
            mask <<= 1
    if rank < 2 * rem:
        others = [i for i in range(size) if i != (rank - 1 if rank % 2 else rank)]
        if rank % 2:
            ch.send(rank - 1, *_parts(buf, layout, others))
        else:
            _receive(ch, rank + 1, buf, layout, others)


def allgather_objects(ch: Channel, blob: Blob) -> list[memoryview]:
    """Every rank passes its blob and gets everyone's, in rank order, as views."""
    size, rank = ch.size, ch.rank
    held: dict[int, Blob] = {rank: blob}
    if size > 1:
        pof2, rem, newrank = fold(rank, size)

        def give(peer: int, indices: Sequence[int]) -> None:
            ch.send(peer, *pack([held[i] for i in indices]))

        def take(peer: int, indices: Sequence[int]) -> None:
            for i, b in zip(indices, unpack(ch.recv(peer).payload)):
                held[i] = [b]

        if rank < 2 * rem:
            (give if rank % 2 == 0 else take)(rank + 1 if rank % 2 == 0 else rank - 1, [rank if rank % 2 == 0 else rank - 1])
        if newrank >= 0:
            mask = 1
            while mask < pof2:
                partner = newrank ^ mask
                mine = range(*real_span(newrank & ~(mask - 1), (newrank & ~(mask - 1)) + mask, rem))
                theirs = range(*real_span(partner & ~(mask - 1), (partner & ~(mask - 1)) + mask, rem))
                peer = real_rank(partner, rem)
                recv = ch.irecv(peer)
                send = ch.isend(peer, *pack([held[i] for i in mine]))
                ch.waitall([recv, send])
                for i, b in zip(theirs, unpack(recv.payload)):
                    held[i] = [b]
                mask <<= 1
        if rank < 2 * rem:
            partner = rank - 1 if rank % 2 else rank + 1
            others = [i for i in range(size) if i != min(rank, partner)]
            (give if rank % 2 else take)(partner, others)
    return [held[i][0] if len(held[i]) == 1 else memoryview(b"".join(held[i])) for i in range(size)]
