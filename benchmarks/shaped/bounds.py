"""What no algorithm can beat on the shaped network, and what others published for real Lambda.

The lower bound of a collective over N hosts, each with one-way latency α and
a link of β seconds per byte (each direction), for n bytes per rank, is the
larger of two terms that cannot overlap away:

- latency: a barrier or any reduction needs ⌈log2 N⌉ rounds of messages
  (each rank must hear, directly or not, from every other): α·⌈log2 N⌉; a
  broadcast the same, an alltoall one round (α);
- bandwidth: an allreduce must send and receive 2(N-1)/N·n through each
  rank's link (reduce-scatter + allgather, optimal), a broadcast n (the root
  sends every byte at least once), an alltoall of n bytes per rank
  (N-1)/N·n (every block but one's own leaves).
"""

from __future__ import annotations

import math

#: Published Lambda figures for a small allreduce, milliseconds by N: (who, {N: ms}).
PUBLISHED = {
    "FMI (1 int)": {2: 0.98, 8: 3.7, 32: 7.3, 128: 15.4},
    "Cylon on FMI (8 B)": {2: 1.9, 32: 13.0},
}


def lower_bound(coll: str, nbytes: int, n: int, alpha: float, beta: float) -> float:
    """Seconds: max(latency term, bandwidth term) for one call (see the module docstring)."""
    if n < 2:
        return 0.0
    rounds = math.ceil(math.log2(n))
    if coll == "barrier":
        return alpha * rounds
    if coll == "allreduce":
        return max(alpha * rounds, 2 * (n - 1) / n * nbytes * beta)
    if coll == "bcast":
        return max(alpha * rounds, nbytes * beta)
    if coll == "alltoall":
        return max(alpha, (n - 1) / n * nbytes * beta)
    raise KeyError(coll)


def published(n: int) -> list[str]:
    """'who: ms' for the published figures at exactly this N."""
    return [f"{who} {figures[n]:g} ms" for who, figures in PUBLISHED.items() if n in figures]
