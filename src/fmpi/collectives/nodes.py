"""Which ranks of a channel share a machine (on Lambda: one function instance running K ranks).

Nodes are contiguous blocks of ``per_node`` world ranks (``FMPI_RANKS_PER_NODE``,
set by the Lambda handler for ``--ranks-per-function``): every rank knows the
layout without a message, so every rank makes the same choice. The
hierarchical algorithms (``*_hierarchical.py``) read it from here.
"""

from __future__ import annotations

from .channel import Channel


def nodes(ch: Channel, per_node: int) -> list[list[int]]:
    """The channel's ranks grouped by node (world rank // per_node), each group in rank order, groups by leader."""
    groups: dict[int, list[int]] = {}
    for r in range(ch.size):
        groups.setdefault(ch.world_rank(r) // per_node, []).append(r)
    return sorted(groups.values())


def worthwhile(ch: Channel, per_node: int) -> bool:
    """Ranks of this channel share nodes and there is more than one node: a hierarchy saves network bytes."""
    if per_node <= 1 or ch.size <= 2:
        return False
    groups = nodes(ch, per_node)
    return 1 < len(groups) < ch.size


def heads(groups: list[list[int]], root: int) -> list[int]:
    """One rank per node that talks across nodes: the root on its own node, the lowest rank elsewhere."""
    return [root if root in g else g[0] for g in groups]
