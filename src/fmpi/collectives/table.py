"""The one place that decides which algorithm runs, by collective, message size, N and the job's network.

Between hosts (``FMPI_NETWORK=lambda``, the default, or ``alpha=US,bandwidth=MBIT``)
bcast, reduce, allreduce, reduce_scatter and allgather take the algorithm the
α-β-γ model expects to finish first (``cost_model.py``): on Lambda's network
the tree and recursive doubling for small vectors, scatter-allgather and
ring-gather from about 256 KiB, Rabenseifner's allreduce from about 64 KiB and
the ring from a few MiB. The other collectives, and any whose knob is set by
hand, follow the rules below. So do ranks on one host (``FMPI_NETWORK=host``,
set by fmpirun for its local ranks) and relayed jobs: every byte they move
costs one shared resource, which the per-rank model does not describe. The
rules were measured on such a host:

::

    collective          algorithm (file)                       when
    ------------------  -------------------------------------  ----------------------------------------------
    barrier             dissemination                          always
    bcast               binomial (segmented, pipelined)        bytes < bcast_large (default: always)
                        scatter_allgather                      otherwise, N > 2
    reduce              binomial                               bytes < reduce_large (default: always), or
                                                               op not commutative
                        ring_gather                            otherwise, N > 2
    allreduce           recursive_doubling                     bytes < allreduce_large_min, or op not
                                                               commutative
                        rabenseifner (halving + doubling)      otherwise, bytes < allreduce_ring_min
                        ring (reduce-scatter + allgather)      otherwise
    reduce_scatter      allreduce (recursive doubling)         commutative and bytes < reduce_scatter_ring_min
                        ring                                   commutative otherwise
                        reduce (binomial, then scatter)        op not commutative
    allgather(v)        recursive_doubling                     total bytes < allgather_ring_min
                        ring                                   otherwise
    gather / scatter    binomial                               equal blocks and total bytes < gather_binomial_max
                        linear                                 otherwise (always for the v-variants)
    alltoall(v)         pairwise                               all N-1 steps in flight when the largest
                                                               block < alltoall_eager_max, else alltoall_window
    scan / exscan       recursive_doubling                     always

Over a relay (the job runs with ``--channel relay``: every pair relayed) and
with a server-side provider (``server_side.py``: fmpi-relay's shared objects
or Redis), barrier and allreduce take the server's form instead:

    barrier             server                                 always (N > 1)
    allreduce           server                                 a predefined commutative op on plain
                                                               numeric elements (else as above)

The choice rests on job-wide settings only (the channel the job was started
with, the relay URL, FMPI_NETWORK, FMPI_RANKS_PER_NODE, the op and datatype
every rank passes), never on one rank's links, so every rank picks alike.

"bytes" is the size of one rank's vector; thresholds are in bytes. Ring
algorithms and tree pipelines cut messages into ``segment``-byte pieces.

The defaults were measured with ``benchmarks/collectives/osu_collectives.py``
on one host (2 cores, N = 2..8, loopback TCP); ``benchmarks/collectives/README.md``
gives the measurements behind each threshold.

Ranks sharing machines (``FMPI_RANKS_PER_NODE`` K > 1: K ranks per Lambda
function) take the ``hierarchical`` allreduce, bcast and reduce (the two
reductions for commutative ops) on any channel spanning several machines,
unless FMPI_COLL_ALGO names another: one vector per machine crosses its
capped NIC, and the step across machines takes the table's algorithm for
that many machines.
Python objects (the lowercase API) always take the same algorithms: binomial
bcast, gather, scatter, reduce; recursive doubling for allreduce, allgather,
scan, exscan; pairwise exchange for alltoall. Environment overrides (for
experiments and tests), read when the table is first used:

- ``FMPI_COLL_ALGO="allreduce:ring,bcast:scatter_allgather"`` forces an
  algorithm per collective (names as in the table). A forced algorithm that
  cannot run a given call (a ring with a non-commutative operation, a
  binomial gather with unequal blocks) falls back to the table's choice.
  ``barrier:dissemination`` or ``allreduce:ring`` keeps a relayed job on the
  point-to-point forms; ``barrier:server,allreduce:server`` uses the relay's
  forms even when links are direct (a rank always has a provider).
- ``FMPI_COLL_<KNOB>=<bytes>`` sets a knob of ``Tuning``, e.g.
  ``FMPI_COLL_SEGMENT=256`` or ``FMPI_COLL_ALLREDUCE_RING_MIN=0``; a threshold
  knob set so puts its collective on the rules even on a network.

``configure(...)`` does the same from Python (tests, benchmarks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from .. import settings
from . import (
    allgather_recursive_doubling,
    allgather_ring,
    allreduce_hierarchical,
    allreduce_rabenseifner,
    allreduce_recursive_doubling,
    allreduce_ring,
    alltoall_pairwise,
    barrier_dissemination,
    bcast_binomial,
    bcast_hierarchical,
    bcast_scatter_allgather,
    cost_model,
    gather_binomial,
    gather_linear,
    nodes,
    reduce_binomial,
    reduce_hierarchical,
    reduce_ring_gather,
    reduce_scatter_composed,
    reduce_scatter_ring,
    scan_recursive_doubling,
    scatter_binomial,
    scatter_linear,
    server_side,
)
from .channel import Channel
from .options import (
    AllgatherOptions,
    AllreduceOptions,
    AlltoallOptions,
    BcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScanOptions,
    ScatterOptions,
)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
OFF = 1 << 62  # a threshold no message reaches


@dataclass(frozen=True)
class Tuning:
    """Thresholds and knobs, in bytes (measured with benchmarks/collectives on loopback TCP)."""

    segment: int = 1 * MiB  # pipeline segment of ring and tree algorithms
    bcast_large: int = OFF  # scatter_allgather from here (see above: off on one host)
    reduce_large: int = OFF  # ring_gather from here (likewise)
    allreduce_large_min: int = 256 * KiB  # Rabenseifner from here (commutative ops, any N) ...
    allreduce_ring_min: int = 16 * MiB  # ... and the ring from here
    reduce_scatter_ring_min: int = 256 * KiB  # whole vector
    allgather_ring_min: int = 2 * MiB  # total gathered bytes
    gather_binomial_max: int = 64 * KiB  # total gathered / scattered bytes
    alltoall_eager_max: int = 256 * KiB  # largest block sent with every step in flight
    alltoall_window: int = 2  # steps in flight above that


def _on_machines(algorithm: Callable[[Channel, Any, int], None]) -> Callable[[Channel, Any], None]:
    """A hierarchical `algorithm(ch, opts, per_node)` as a table entry (FMPI_RANKS_PER_NODE read at each call)."""
    return lambda ch, opts: algorithm(ch, opts, settings.current().ranks_per_node)


ALGORITHMS: dict[str, dict[str, Callable[[Channel, Any], None]]] = {
    "barrier": {"dissemination": lambda ch, _opts: barrier_dissemination.barrier(ch), "server": server_side.barrier},
    "bcast": {"binomial": bcast_binomial.bcast, "scatter_allgather": bcast_scatter_allgather.bcast,
              "hierarchical": _on_machines(bcast_hierarchical.bcast)},
    "reduce": {"binomial": reduce_binomial.reduce, "ring_gather": reduce_ring_gather.reduce,
               "hierarchical": _on_machines(reduce_hierarchical.reduce)},
    "allreduce": {
        "recursive_doubling": allreduce_recursive_doubling.allreduce,
        "ring": allreduce_ring.allreduce,
        "rabenseifner": allreduce_rabenseifner.allreduce,
        "server": server_side.allreduce,
        "hierarchical": _on_machines(allreduce_hierarchical.allreduce),
    },
    "reduce_scatter": {
        "allreduce": reduce_scatter_composed.via_allreduce,
        "ring": reduce_scatter_ring.reduce_scatter,
        "reduce": reduce_scatter_composed.via_reduce,
    },
    "allgather": {"recursive_doubling": allgather_recursive_doubling.allgather, "ring": allgather_ring.allgather},
    "gather": {"binomial": gather_binomial.gather, "linear": gather_linear.gather},
    "scatter": {"binomial": scatter_binomial.scatter, "linear": scatter_linear.scatter},
    "alltoall": {"pairwise": alltoall_pairwise.alltoall},
    "scan": {"recursive_doubling": scan_recursive_doubling.scan},
}

# Collectives with a form over the machines' structure (FMPI_RANKS_PER_NODE > 1), chosen by ``pick``.
HIERARCHICAL = "hierarchical"
_HIERARCHICAL = frozenset({"allreduce", "bcast", "reduce"})

# What a forced algorithm needs from the call; a forced choice that fails its check is ignored.
_NEEDS_COMMUTE = {("reduce", "ring_gather"), ("reduce", "hierarchical"), ("allreduce", "ring"), ("allreduce", "rabenseifner"),
                  ("allreduce", "hierarchical"), ("reduce_scatter", "ring"), ("reduce_scatter", "allreduce")}
_NEEDS_EQUAL_BLOCKS = {("gather", "binomial"), ("scatter", "binomial")}


# The collectives each knob moves: a knob set by hand puts its collective back on the threshold rules.
_KNOB_COLLECTIVES = {
    "bcast_large": "bcast", "reduce_large": "reduce", "allreduce_large_min": "allreduce",
    "allreduce_ring_min": "allreduce", "reduce_scatter_ring_min": "reduce_scatter", "allgather_ring_min": "allgather",
}


class _Config:
    def __init__(self) -> None:
        self.tuning: Tuning | None = None
        self.forced: dict[str, str] = {}
        # The job's network (None: ranks share one host or one relay, where the measured thresholds hold)
        self.network: cost_model.Network | None = None
        self.ruled: frozenset[str] = frozenset()  # collectives whose thresholds were set by hand
        self.generation = 0  # bumped whenever the settings change (callers remember choices per generation)

    def load(self) -> None:
        """The environment's settings (read again: tests and benchmarks change it between calls)."""
        current = settings.read()
        known = {f.name for f in fields(Tuning)}
        unknown = sorted(set(current.coll_knobs) - known)
        if unknown:
            raise ValueError(
                f"unknown collectives knob {', '.join('FMPI_COLL_' + k.upper() for k in unknown)} "
                f"(known: {', '.join('FMPI_COLL_' + k.upper() for k in sorted(known))})"
            )
        self.tuning = Tuning(**current.coll_knobs)
        self.forced = parse_forced(current.coll_algo)
        shared = current.network is None or current.channel == "relay"  # a relay carries every rank's bytes
        self.network = None if shared else cost_model.Network(*current.network)
        self.ruled = frozenset(_KNOB_COLLECTIVES[k] for k in current.coll_knobs if k in _KNOB_COLLECTIVES)
        self.generation += 1


_config = _Config()


def parse_forced(spec: str) -> dict[str, str]:
    forced = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        coll, _, algo = item.partition(":")
        coll, algo = coll.strip(), algo.strip()
        if coll not in ALGORITHMS or algo not in ALGORITHMS[coll]:
            known = ", ".join(f"{c}:{a}" for c in ALGORITHMS for a in ALGORITHMS[c])
            raise ValueError(f"FMPI_COLL_ALGO: unknown algorithm {item!r} (known: {known})")
        forced[coll] = algo
    return forced


def tuning() -> Tuning:
    if _config.tuning is None:
        _config.load()
    return _config.tuning


_UNCHANGED: Any = object()


def configure(
    forced: dict[str, str] | str | None = None, network: cost_model.Network | None = _UNCHANGED, **knobs: int
) -> None:
    """Override algorithms, the network (None: one host) and knobs for this process (tests, benchmarks).

    ``configure()`` resets."""
    if forced is None and not knobs and network is _UNCHANGED:
        _config.load()
        return
    base = tuning()
    _config.tuning = replace(base, **knobs)
    _config.ruled |= {_KNOB_COLLECTIVES[k] for k in knobs if k in _KNOB_COLLECTIVES}
    if network is not _UNCHANGED:
        _config.network = network
    if forced is not None:
        _config.forced = parse_forced(forced) if isinstance(forced, str) else dict(forced)
    _config.generation += 1


def reset() -> None:
    """Back to the environment's settings."""
    _config.load()


# ------------------------------------------------------------------- choice
def _can_run(collective: str, algorithm: str, commute: bool, equal_blocks: bool) -> bool:
    return (commute or (collective, algorithm) not in _NEEDS_COMMUTE) and (
        equal_blocks or (collective, algorithm) not in _NEEDS_EQUAL_BLOCKS
    )


def server_forced() -> bool:
    """FMPI_COLL_ALGO asks for a server-side form somewhere (then ranks attach a provider whatever the channel)."""
    if _config.tuning is None:
        _config.load()
    return "server" in _config.forced.values()


def choose(
    collective: str, nbytes: int, size: int, commute: bool = True, equal_blocks: bool = True, server: bool = False
) -> str:
    """The algorithm for one call: `nbytes` per the table above.

    `server`: the call may run on the relay (``server_side.can_run``: the
    job is relayed, a provider is there, the op and datatype suit it).
    """
    t = tuning()
    forced = _config.forced.get(collective)
    if forced == HIERARCHICAL:
        forced = None  # chosen in ``pick`` only, where the channel's machines are known
    if forced is not None and _can_run(collective, forced, commute, equal_blocks) and (forced != "server" or server):
        return forced
    if server and collective in ("barrier", "allreduce"):
        return "server"
    network = _config.network
    if network is not None and size > 1 and collective in cost_model.COSTS and collective not in _config.ruled:
        allowed = frozenset(a for a in cost_model.COSTS[collective] if _can_run(collective, a, commute, equal_blocks))
        if allowed:
            return cost_model.cheapest(collective, nbytes, size, network, allowed)
    if collective == "barrier":
        return "dissemination"
    if collective == "bcast":
        return "scatter_allgather" if nbytes >= t.bcast_large and size > 2 else "binomial"
    if collective == "reduce":
        return "ring_gather" if commute and nbytes >= t.reduce_large and size > 2 else "binomial"
    if collective == "allreduce":
        if not commute or size == 1 or nbytes < t.allreduce_large_min:
            return "recursive_doubling"
        return "ring" if nbytes >= t.allreduce_ring_min else "rabenseifner"
    if collective == "reduce_scatter":
        if not commute:
            return "reduce"
        return "ring" if nbytes >= t.reduce_scatter_ring_min else "allreduce"
    if collective == "allgather":
        return "ring" if nbytes >= t.allgather_ring_min else "recursive_doubling"
    if collective in ("gather", "scatter"):
        return "binomial" if equal_blocks and nbytes < t.gather_binomial_max else "linear"
    if collective == "alltoall":
        return "pairwise"
    if collective == "scan":
        return "recursive_doubling"
    raise KeyError(collective)


def run(collective: str, ch: Channel, opts: Any, nbytes: int, commute: bool = True, equal_blocks: bool = True) -> str:
    """Pick and run an algorithm; returns its name."""
    name = pick(collective, ch, opts, nbytes, commute, equal_blocks)
    ALGORITHMS[collective][name](ch, opts)
    return name


def run_flat(collective: str, ch: Channel, opts: Any, nbytes: int, commute: bool = True) -> None:
    """Run the algorithm ``choose`` picks, never a hierarchical one: a hierarchical algorithm's step across
    machines, on a channel of one rank per machine."""
    ALGORITHMS[collective][choose(collective, nbytes, ch.size, commute)](ch, opts)


def pick(collective: str, ch: Channel, opts: Any, nbytes: int, commute: bool = True, equal_blocks: bool = True) -> str:
    """The algorithm ``run`` would run for this call (the same for any call of this communicator with equal
    arguments, as long as ``generation()`` stays the same)."""
    server = ch.server is not None and server_side.can_run(collective, ch, opts)
    if collective in _HIERARCHICAL and not server and _can_run(collective, HIERARCHICAL, commute, equal_blocks):
        forced = tuning() and _config.forced.get(collective)
        per_node = settings.current().ranks_per_node
        if forced == HIERARCHICAL or (forced is None and nodes.worthwhile(ch, per_node)):
            return HIERARCHICAL  # ranks share machines: one vector per machine crosses its NIC (see those modules)
    return choose(collective, nbytes, ch.size, commute, equal_blocks, server)


# Algorithms that can work out a call's steps once, for a caller that repeats the very same call
# (``api/repeated_calls.py``): built once as ``cls(rank, size, opts)``, then ``.run(channel)`` per call.
PLANS: dict[tuple[str, str], Callable[[int, int, Any], Any]] = {
    ("allreduce", "recursive_doubling"): allreduce_recursive_doubling.Plan,
}


def prepare(collective: str, name: str, ch: Channel, opts: Any) -> Callable[[Channel], None]:
    """What runs algorithm `name` with `opts` on any channel of ``ch``'s communicator, planned once if it can be."""
    plan = PLANS.get((collective, name))
    if plan is not None:
        return plan(ch.rank, ch.size, opts).run
    algorithm = ALGORITHMS[collective][name]
    return lambda channel: algorithm(channel, opts)


def generation() -> int:
    """Changes whenever the settings do (``configure``, ``reset``): a remembered ``pick`` is stale then."""
    if _config.tuning is None:
        _config.load()
    return _config.generation


def alltoall_window(largest_block: int, size: int) -> int:
    t = tuning()
    return max(1, size - 1) if largest_block < t.alltoall_eager_max else t.alltoall_window


__all__ = [
    "ALGORITHMS", "AllgatherOptions", "AllreduceOptions", "AlltoallOptions", "BcastOptions", "GatherOptions", "ReduceOptions",
    "ReduceScatterOptions", "ScanOptions", "ScatterOptions", "Tuning", "alltoall_window", "choose", "configure", "generation",
    "pick", "prepare", "reset", "run", "run_flat", "server_forced", "tuning",
]
