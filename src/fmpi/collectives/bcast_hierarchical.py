"""Hierarchical broadcast, for ranks that share machines (on Lambda: K ranks per function instance).

K ranks of one function share its capped NIC. A flat tree can send the same
vector into one function several times (a binomial tree whose root is not at
a function boundary, or K not a power of two, has several edges into one
function); this one sends it into each function exactly once:

1. broadcast across nodes between one head per node only (the root on its own
   node, the lowest rank elsewhere: ``nodes.heads``), with the algorithm the
   table picks for that many heads and bytes;
2. inside each node the head sends the vector to its members, over loopback.

A pair of ranks talks in one step only (heads to heads, then a head to its own
members), so the steps' messages never mix under the call's one tag.
"""

from __future__ import annotations

from collections.abc import Callable

from .channel import Channel
from .nodes import heads, nodes
from .options import BcastOptions


def bcast(ch: Channel, opts: BcastOptions, per_node: int,
          across: Callable[[Channel, BcastOptions], None] | None = None) -> None:
    """`across(heads_channel, opts)`: the broadcast between the heads (step 1); by default the table's choice."""
    if across is None:
        across = _flat
    groups = nodes(ch, per_node)
    top = heads(groups, opts.root)
    node = next(i for i, g in enumerate(groups) if ch.rank in g)
    head = top[node]
    if ch.rank != head:
        ch.recv(head, opts.buf)  # 2. from the head of this node
        return
    if len(top) > 1:  # 1. across nodes, heads only
        across(ch.subset(top), BcastOptions(opts.buf, top.index(opts.root), opts.segment))
    ch.waitall([ch.isend(member, opts.buf) for member in groups[node] if member != head])  # 2.


def _flat(ch: Channel, opts: BcastOptions) -> None:
    from . import table  # (the table imports this module)

    table.run_flat("bcast", ch, opts, len(opts.buf))
