"""Reduce-scatter built from other collectives, where the ring does not fit.

- ``via_allreduce``: small vectors; one recursive-doubling allreduce (log2 N
  rounds instead of the ring's N-1) and each rank keeps its block.
- ``via_reduce``: non-commutative operations; a binomial reduction to rank 0
  in rank order, then a linear scatter of the blocks.
"""

from __future__ import annotations

import numpy as np

from . import allreduce_recursive_doubling, reduce_binomial, scatter_linear
from .channel import Channel, as_bytes
from .options import (
    AllreduceOptions,
    Layout,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)
from .reduce_scatter_ring import blocks_of


def via_allreduce(ch: Channel, opts: ReduceScatterOptions) -> None:
    full = np.empty_like(opts.send)
    allreduce_recursive_doubling.allreduce(
        ch, AllreduceOptions(opts.send, full, opts.combine, opts.commute, opts.segment)
    )
    lo, hi = blocks_of(opts.counts)[ch.rank]
    np.copyto(opts.recv, full[lo:hi])


def via_reduce(ch: Channel, opts: ReduceScatterOptions) -> None:
    full = np.empty_like(opts.send) if ch.rank == 0 else None
    reduce_binomial.reduce(ch, ReduceOptions(opts.send, full, opts.combine, opts.commute, 0, opts.segment))
    item = opts.send.itemsize
    blocks = blocks_of(opts.counts)
    layout = Layout([lo * item for lo, _ in blocks], [(hi - lo) * item for lo, hi in blocks])
    scatter_linear.scatter(
        ch, ScatterOptions(as_bytes(full) if full is not None else None, layout, as_bytes(opts.recv), -1, 0)
    )
