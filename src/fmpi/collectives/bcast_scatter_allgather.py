"""Broadcast by scatter + allgather (van de Geijn): for large buffers.

The buffer is cut into N nearly equal blocks. A binomial scatter gives
relative rank j block j (each rank receives only its subtree's blocks,
straight into place), then a ring allgather completes every rank's copy.
The root sends each byte about once instead of log2(N) times, and every
link carries about 2(N-1)/N of the buffer in total.
"""

from __future__ import annotations

from ..util.ranges import split_even
from .allgather_ring import ring
from .channel import Channel
from .options import BcastOptions, Layout
from .ranks import subtree


def bcast(ch: Channel, opts: BcastOptions) -> None:
    size, root, buf = ch.size, opts.root, opts.buf
    if size == 1 or len(buf) == 0:
        return
    cuts = split_even(len(buf), size)  # block j belongs to relative rank j
    layout = Layout([lo for lo, _ in cuts], [hi - lo for lo, hi in cuts])
    rel = (ch.rank - root) % size

    def span(first: int, count: int) -> memoryview:
        return buf[cuts[first][0] : cuts[first + count - 1][1]]

    if rel:
        ch.recv(((rel - (rel & -rel)) + root) % size, span(rel, subtree(rel, size)))
    sends = []
    mask = 1
    while mask < subtree(rel, size):
        child = rel + mask
        sends.append(ch.isend((child + root) % size, span(child, subtree(child, size))))
        mask <<= 1
    ch.waitall(sends)
    ring(ch, buf, layout, opts.segment, block_of=lambda r: (r - root) % size)
