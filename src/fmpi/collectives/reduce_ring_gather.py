"""Reduction to a root for large vectors: ring reduce-scatter, then gather the blocks.

Rabenseifner's idea with a ring: instead of moving the whole vector up a
tree log2(N) times, every rank reduces 1/N of it (ring reduce-scatter), and
the root collects the N finished blocks straight into its result. Each rank
sends about (N-1)/N + 1/N of the vector. Commutative operations only.
"""

from __future__ import annotations

import numpy as np

from ..util.ranges import split_even
from . import reduce_scatter_ring
from .channel import Channel, as_bytes
from .options import ReduceOptions


def reduce(ch: Channel, opts: ReduceOptions) -> None:
    if not opts.commute:
        raise ValueError("the ring reduce needs a commutative operation")
    size, rank, root = ch.size, ch.rank, opts.root
    send = opts.send
    blocks = split_even(len(send), size)
    acc = opts.recv if rank == root else np.empty_like(send)
    reduce_scatter_ring.ring(ch, send, acc, blocks, opts.combine, opts.segment)
    if rank != root:
        lo, hi = blocks[rank]
        ch.send(root, as_bytes(acc[lo:hi]))
        return
    ch.waitall([ch.irecv(q, as_bytes(acc[lo:hi])) for q, (lo, hi) in enumerate(blocks) if q != root])
