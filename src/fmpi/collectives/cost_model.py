"""What each collective algorithm costs on a network of separate hosts: the α-β-γ model the table chooses by.

Hockney's model, as MPICH's and Open MPI's tuning papers use it: a message of
m bytes between two ranks takes α + m·β (α: one-way latency plus both ends'
software; β: seconds per byte through one rank's link), reducing m bytes
takes m·γ. Every rank has a link of its own (a Lambda function, a host), so
an algorithm costs what its busiest rank's chain of steps costs, not the sum
over ranks. Formulas per algorithm (n: bytes per rank, N ranks, L = ⌈log2 N⌉,
p the largest power of two ≤ N; folding in the other N - p ranks costs one
whole-vector exchange before and after):

    bcast      binomial            L·α + L·n·β              (the root sends n to each of its L children)
               scatter_allgather   (L + N-1)·α + 2(N-1)/N·n·β
    reduce     binomial            L·(α + n·β + n·γ)
               ring_gather         N·α + 2(N-1)/N·n·β + (N-1)/N·n·γ
    allreduce  recursive_doubling  (log2 p + fold)·(α + n·β + n·γ)           (β doubled: see below)
               rabenseifner        2·log2 p·α + 2(p-1)/p·n·β + (p-1)/p·n·γ  (+ fold; likewise)
               ring                2(N-1)·α + 2(N-1)/N·n·β + (N-1)/N·n·γ
    reduce_scatter  allreduce      as recursive_doubling (n: the whole vector)
               ring                (N-1)·α + (N-1)/N·n·(β + γ)
    allgather  recursive_doubling  log2 p·α + (N-1)/N·n·β  (+ fold; n: the gathered total)
               ring                (N-1)·α + (N-1)/N·n·β

One term is fmpi's own rather than the wire's: two ranks exchanging
messages above the eager limit (1 MiB: they go by rendezvous, whole) move
them at about half the link's rate each way, where segmented pipelines run
at the full rate. Measured in the shaped lab (benchmarks/netlab.py: 150 µs,
620 Mbit/s), a 16 MiB allreduce at N = 2 took 420-640 ms by recursive
doubling (one 16 MiB exchange; the link's rate allows 216 ms), 350-430 ms by
Rabenseifner (two 8 MiB exchanges), 235-247 ms by the ring (1 MiB segments)
and 260-320 ms under MPICH. So the bytes of such messages count twice
(``LARGE_EXCHANGE``), which hands vectors of several MiB to the ring.

Ranks that share one host's cores (the local backend) or one relay do not
fit it: there every byte any rank moves costs the same shared CPU, so the
table keeps its measured thresholds for them (``Network`` is None).

The hierarchical algorithms (several ranks per function: one rank per
function talks over the network) are not priced here: ``table.pick`` takes
them whenever a channel's ranks share functions, and their step between
functions takes this model's choice for that many functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Network:
    """The job's network, the same on every rank (so all ranks choose alike)."""

    alpha: float  # seconds per message: one-way latency and the software at both ends
    beta: float  # seconds per byte through one rank's link
    gamma: float  # seconds per byte reduced


#: Exchanged messages above this many bytes move at about half the link's rate (see above).
LARGE_EXCHANGE = 1 << 20


def _exchange(nbytes: float, w: Network) -> float:
    """One exchange step of `nbytes` each way: latency and bytes (twice the bytes above LARGE_EXCHANGE)."""
    return w.alpha + nbytes * w.beta * (2 if nbytes > LARGE_EXCHANGE else 1)


def _fold(n: int, size: int, alpha: float, beta: float, gamma: float) -> float:
    """Folding the ranks past the largest power of two in and out: two whole-vector steps, one reduction."""
    return 0.0 if size & (size - 1) == 0 else 2 * (alpha + n * beta) + n * gamma


def _bcast_binomial(n: int, size: int, w: Network) -> float:
    rounds = math.ceil(math.log2(size))
    return rounds * (w.alpha + n * w.beta)


def _bcast_scatter_allgather(n: int, size: int, w: Network) -> float:
    return (math.ceil(math.log2(size)) + size - 1) * w.alpha + 2 * (size - 1) / size * n * w.beta


def _reduce_binomial(n: int, size: int, w: Network) -> float:
    return math.ceil(math.log2(size)) * (w.alpha + n * (w.beta + w.gamma))


def _reduce_ring_gather(n: int, size: int, w: Network) -> float:
    share = (size - 1) / size * n
    return size * w.alpha + 2 * share * w.beta + share * w.gamma


def _allreduce_recursive_doubling(n: int, size: int, w: Network) -> float:
    steps = size.bit_length() - 1  # log2 p
    return steps * (_exchange(n, w) + n * w.gamma) + _fold(n, size, w.alpha, w.beta, w.gamma)


def _allreduce_rabenseifner(n: int, size: int, w: Network) -> float:
    steps = size.bit_length() - 1
    halves = sum(_exchange(n / 2**k, w) + n / 2**k * w.gamma for k in range(1, steps + 1))
    doubling = sum(_exchange(n / 2**k, w) for k in range(1, steps + 1))
    return halves + doubling + _fold(n, size, w.alpha, w.beta, w.gamma)


def _allreduce_ring(n: int, size: int, w: Network) -> float:
    share = (size - 1) / size * n
    return 2 * (size - 1) * w.alpha + 2 * share * w.beta + share * w.gamma


def _reduce_scatter_ring(n: int, size: int, w: Network) -> float:
    return (size - 1) * w.alpha + (size - 1) / size * n * (w.beta + w.gamma)


def _allgather_recursive_doubling(n: int, size: int, w: Network) -> float:
    p = 1 << (size.bit_length() - 1)
    return math.log2(p) * w.alpha + (size - 1) / size * n * w.beta + _fold(n, size, w.alpha, w.beta, 0.0)


def _allgather_ring(n: int, size: int, w: Network) -> float:
    return (size - 1) * w.alpha + (size - 1) / size * n * w.beta


#: {collective: {algorithm: seconds(n, N, network)}}; a collective not here is chosen by the table's rules.
COSTS: dict[str, dict[str, Callable[[int, int, Network], float]]] = {
    "bcast": {"binomial": _bcast_binomial, "scatter_allgather": _bcast_scatter_allgather},
    "reduce": {"binomial": _reduce_binomial, "ring_gather": _reduce_ring_gather},
    "allreduce": {
        "recursive_doubling": _allreduce_recursive_doubling,
        "rabenseifner": _allreduce_rabenseifner,
        "ring": _allreduce_ring,
    },
    "reduce_scatter": {"allreduce": _allreduce_recursive_doubling, "ring": _reduce_scatter_ring},
    "allgather": {"recursive_doubling": _allgather_recursive_doubling, "ring": _allgather_ring},
}


def estimate(collective: str, algorithm: str, nbytes: int, size: int, network: Network) -> float:
    """Seconds the model gives one call (KeyError for an algorithm it has no formula for)."""
    return COSTS[collective][algorithm](nbytes, size, network)


@lru_cache(maxsize=4096)
def cheapest(collective: str, nbytes: int, size: int, network: Network, allowed: frozenset[str]) -> str:
    """The algorithm of `allowed` the model expects to finish first.

    Within 1 % of the cheapest counts as a tie, won by the first in COSTS' order: Rabenseifner and the ring
    at N = 2 cost the same on paper, and Rabenseifner ran a 1 MiB allreduce in 18-25 ms in the shaped lab
    against the ring's 24-28 ms (interleaved, 3 runs each).
    """
    costs = {a: COSTS[collective][a](nbytes, size, network) for a in COSTS[collective] if a in allowed}
    best = min(costs.values())
    return next(a for a, cost in costs.items() if cost <= best * 1.01)
