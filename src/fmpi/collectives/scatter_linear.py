"""Linear scatter: the root sends every rank its block directly.

Each block leaves the root's buffer without a copy and lands in its
receiver's buffer; it is the algorithm for Scatterv (only the root knows the
layout) and for large blocks.
"""

from __future__ import annotations

from .channel import Channel
from .options import ScatterOptions


def scatter(ch: Channel, opts: ScatterOptions) -> None:
    size, rank, root = ch.size, ch.rank, opts.root
    if rank != root:
        ch.recv(root, opts.recv)
        return
    layout, send = opts.layout, opts.send
    sends = [ch.isend(r, layout.view(send, r)) for r in range(size) if r != root]
    if opts.recv is not None:
        opts.recv[:] = layout.view(send, root)
    ch.waitall(sends)
