"""Hierarchical reduce, for ranks that share machines (on Lambda: K ranks per function instance).

The mirror of ``bcast_hierarchical.py``: each function's K contributions
leave it folded into one vector, so every function's capped NIC carries one
vector, not one per rank:

1. inside each node the members send their vectors to the node's head (the
   root on its own node, the lowest rank elsewhere: ``nodes.heads``), which
   folds them in over loopback;
2. reduce across nodes between the heads only, to the root, with the
   algorithm the table picks for that many heads and bytes.

Commutative operations only (a node's fold is not in rank order). A pair of
ranks talks in one step only, so the steps' messages never mix under the
call's one tag.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .channel import Channel, as_bytes
from .nodes import heads, nodes
from .options import ReduceOptions


def reduce(ch: Channel, opts: ReduceOptions, per_node: int,
           across: Callable[[Channel, ReduceOptions], None] | None = None) -> None:
    """`across(heads_channel, opts)`: the reduce between the heads (step 2); by default the table's choice."""
    if across is None:
        across = _flat
    if not opts.commute:
        raise ValueError("the hierarchical reduce needs a commutative operation")
    groups = nodes(ch, per_node)
    top = heads(groups, opts.root)
    node = next(i for i, g in enumerate(groups) if ch.rank in g)
    head = top[node]
    if ch.rank != head:
        ch.send(head, as_bytes(np.ascontiguousarray(opts.send)))  # 1. up to the head
        return
    partial = opts.recv if ch.rank == opts.root else np.empty_like(opts.send)
    if partial is not opts.send:
        np.copyto(partial, opts.send)
    members = [m for m in groups[node] if m != head]
    scratch = np.empty_like(opts.send) if members else None
    for member in members:  # 1. fold the node's members in, one scratch vector at a time
        ch.recv(member, as_bytes(scratch))
        opts.combine(partial, scratch, partial)
    if len(top) > 1:  # 2. across nodes, heads only; the root's partial is already its result buffer
        recv = partial if ch.rank == opts.root else None
        across(ch.subset(top), ReduceOptions(partial, recv, opts.combine, True, top.index(opts.root), opts.segment))


def _flat(ch: Channel, opts: ReduceOptions) -> None:
    from . import table  # (the table imports this module)

    table.run_flat("reduce", ch, opts, opts.send.nbytes)
