"""Hierarchical allreduce, for ranks that share machines (on Lambda: K ranks per function instance).

A Lambda function's network is capped (about 620 Mbit/s sustained) whatever
its vCPUs, and K ranks of one function share that one NIC. A flat allreduce
sends about 2V bytes per rank (V: the vector), so 2KV through each function's
NIC; this one sends them through the NIC once:

1. reduce inside the node: every member sends its vector to the node's
   leader (its lowest rank), over loopback; the leader folds them in;
2. allreduce across nodes between the leaders only, with the algorithm the
   table picks for that many leaders and bytes (so about 2V per NIC);
3. broadcast inside the node: the leader sends the result to its members.

Nodes are contiguous blocks of ``per_node`` world ranks (``nodes.py``). The messages
of the three steps never mix under the call's one tag: step 2 is between
leaders only, and between a member and its leader step 1 goes up and step 3
comes down after it.

Commutative operations only (the node's fold is not in rank order). Every
rank ends with the leaders' result, which step 2 makes equal on all leaders.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .channel import Channel, as_bytes
from .nodes import nodes
from .options import AllreduceOptions


def allreduce(ch: Channel, opts: AllreduceOptions, per_node: int,
              across: Callable[[Channel, AllreduceOptions], None] | None = None) -> None:
    """`across(leaders_channel, opts)`: the allreduce between the leaders (step 2); by default the one the
    table picks for that many leaders and bytes."""
    if across is None:
        across = _flat
    if not opts.commute:
        raise ValueError("the hierarchical allreduce needs a commutative operation")
    groups = nodes(ch, per_node)
    mine = next(g for g in groups if ch.rank in g)
    leader = mine[0]
    recv = opts.recv
    if ch.rank != leader:
        ch.send(leader, as_bytes(np.ascontiguousarray(opts.send)))  # 1. up
        ch.recv(leader, as_bytes(recv))  # 3. down
        return
    if opts.send is not recv:
        recv[...] = opts.send
    scratch = np.empty_like(recv) if len(mine) > 1 else None
    for member in mine[1:]:  # 1. fold the members in, in rank order
        ch.recv(member, as_bytes(scratch))
        opts.combine(recv, scratch, recv)
    leaders = [g[0] for g in groups]
    if len(leaders) > 1:  # 2. across nodes, leaders only, in place
        sub = ch.subset(leaders)
        across(sub, AllreduceOptions(recv, recv, opts.combine, True, opts.segment, opts.server_op))
    sends = [ch.isend(member, as_bytes(recv)) for member in mine[1:]]  # 3. down
    for op in sends:
        ch.wait(op)


def _flat(ch: Channel, opts: AllreduceOptions) -> None:
    from . import table  # (the table imports this module)

    table.run_flat("allreduce", ch, opts, opts.recv.nbytes)
