"""Consistent hashing of shared-object names onto relay nodes (what ``DsoClient`` shards by)."""

from __future__ import annotations

import bisect
import hashlib
from typing import Sequence


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Consistent hashing of names onto nodes, with `vnodes` points per node.

    Deterministic across processes and independent of the order the nodes
    are listed in: every rank maps a name to the same node.
    """

    def __init__(self, nodes: Sequence[str], vnodes: int = 128) -> None:
        if not nodes:
            raise ValueError("a hash ring needs at least one node")
        points = sorted((_hash(f"{node}#{i}"), node) for node in set(nodes) for i in range(vnodes))
        self._keys = [p[0] for p in points]
        self._nodes = [p[1] for p in points]

    def node(self, name: str) -> str:
        i = bisect.bisect(self._keys, _hash(name)) % len(self._keys)
        return self._nodes[i]
