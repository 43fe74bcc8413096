"""Graph process topologies: ``Create_graph``/``Graphcomm``/``Graph_map`` (every rank passes the
whole graph) and ``Create_dist_graph(_adjacent)``/``Distgraphcomm`` (each rank passes a part).

``Create_dist_graph`` gathers every rank's edges, so each rank learns its in- and
out-neighbours; they are listed in the order of the ranks that named them, each
rank's edges in the order given, as MPICH lists them. ``reorder`` is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import exceptions as err
from .comm import Comm
from .constants import UNDEFINED, Sentinel
from .topology import DIST_GRAPH, GRAPH, Topocomm


UNWEIGHTED = Sentinel("UNWEIGHTED")  # (markers compared by identity)
WEIGHTS_EMPTY = Sentinel("WEIGHTS_EMPTY")


def _graph_arrays(index: Sequence[int], edges: Sequence[int]) -> tuple[list[int], list[int]]:
    """(index without a leading 0, edges): mpi4py takes the 'standard' adjacency form with the 0 too."""
    index, edges = [int(i) for i in index], [int(e) for e in edges]
    if len(index) > 1 and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]
    if any(b < a for a, b in zip([0, *index], index)) or (index and index[-1] != len(edges)):
        raise err.Exception(err.ERR_ARG, f"invalid graph: index {index} does not describe {len(edges)} edges")
    return index, edges


def create_graph(comm, index: Sequence[int], edges: Sequence[int], reorder: bool = False):
    index, edges = _graph_arrays(index, edges)
    nnodes = len(index)
    if nnodes > comm.size or any(not 0 <= e < nnodes for e in edges):
        raise err.Exception(err.ERR_ARG, f"invalid graph of {nnodes} nodes for a communicator of {comm.size}")
    sub = comm.Split(0 if comm.rank < nnodes else UNDEFINED, comm.rank)
    if sub is None:
        return None
    graph = Graphcomm(sub._engine, sub._group, sub._ctx)
    graph._index, graph._edges = index, edges
    return graph


def graph_map(comm, index: Sequence[int], edges: Sequence[int]) -> int:
    index, _ = _graph_arrays(index, edges)
    return comm.rank if comm.rank < len(index) else UNDEFINED


class Graphcomm(Topocomm):
    """Communicator whose processes are the nodes of a graph (Create_graph)."""
    _kinds = (GRAPH,)
    topology = GRAPH
    _index: list[int]
    _edges: list[int]

    def Get_topology(self) -> int:
        """
        Return the topology type: GRAPH."""
        self._live()
        return GRAPH

    def _with_topology(self, context: int) -> Graphcomm:
        graph = Graphcomm(self._engine, self._group, context)
        graph._index, graph._edges = list(self._index), list(self._edges)
        return graph

    def _neighbor_lists(self) -> tuple[list[int], list[int], list[int]]:
        neighbors = self.Get_neighbors(self.rank)
        return neighbors, neighbors, list(range(len(neighbors)))

    def Get_dims(self) -> tuple[int, int]:
        """
        Return (number of nodes, number of edges)."""
        return len(self._index), len(self._edges)

    dims = property(Get_dims)

    @property
    def nnodes(self) -> int:
        return len(self._index)

    @property
    def nedges(self) -> int:
        return len(self._edges)

    def Get_topo(self) -> tuple[list[int], list[int]]:
        """
        Return (index, edges), the graph as Create_graph took it."""
        return list(self._index), list(self._edges)

    topo = property(Get_topo)

    @property
    def index(self) -> list[int]:
        return list(self._index)

    @property
    def edges(self) -> list[int]:
        return list(self._edges)

    def Get_neighbors_count(self, rank: int) -> int:
        """
        Return the number of neighbors of `rank`."""
        return len(self.Get_neighbors(rank))

    def Get_neighbors(self, rank: int) -> list[int]:
        """
        Return the neighbors of `rank`."""
        if not 0 <= rank < len(self._index):
            raise err.Exception(err.ERR_RANK, f"invalid rank {rank} for a graph of {len(self._index)} nodes")
        start = self._index[rank - 1] if rank else 0
        return self._edges[start : self._index[rank]]

    @property
    def nneighbors(self) -> int:
        return self.Get_neighbors_count(self.rank)

    @property
    def neighbors(self) -> list[int]:
        return self.Get_neighbors(self.rank)


def _weights(weights: Any, degree: int) -> list[int] | None:
    if weights is None or weights is UNWEIGHTED:
        return None
    if weights is WEIGHTS_EMPTY:
        if degree:
            raise ValueError("empty weights but nonzero degree")
        return []
    weights = [int(w) for w in weights]
    if len(weights) != degree:
        raise ValueError(f"expecting {degree} weights, got {len(weights)}")
    return weights


def create_dist_graph_adjacent(comm, sources: Sequence[int] | None, destinations: Sequence[int] | None,
                               sourceweights: Any = None, destweights: Any = None):
    sources = [int(s) for s in sources] if sources is not None else []
    destinations = [int(d) for d in destinations] if destinations is not None else []
    sw, dw = _weights(sourceweights, len(sources)), _weights(destweights, len(destinations))
    if any(not 0 <= r < comm.size for r in sources + destinations):
        raise err.Exception(err.ERR_RANK, f"a neighbour in {sources} / {destinations} is not a rank of {comm.size}")
    sub = comm.Dup()
    return Distgraphcomm(sub._engine, sub._group, sub._ctx, sources, destinations,
                         (sw, dw) if sw is not None and dw is not None else None)


def create_dist_graph(comm, sources: Sequence[int], degrees: Sequence[int], destinations: Sequence[int],
                      weights: Any = None):
    sources, degrees, destinations = [int(s) for s in sources], [int(d) for d in degrees], [int(d) for d in destinations]
    if len(sources) != len(degrees) or sum(degrees) != len(destinations) or any(d < 0 for d in degrees):
        raise ValueError(f"invalid distributed graph: sources {sources}, degrees {degrees}, {len(destinations)} destinations")
    weighted = _weights(weights, len(destinations))
    edges, pos = [], 0
    for source, degree in zip(sources, degrees):
        for k in range(pos, pos + degree):
            edges.append((source, destinations[k], weighted[k] if weighted else 1))
        pos += degree
    everyone = comm.allgather((edges, weighted is not None))
    me = comm.rank
    ins = [(s, w) for rank_edges, _ in everyone for s, d, w in rank_edges if d == me]
    outs = [(d, w) for rank_edges, _ in everyone for s, d, w in rank_edges if s == me]
    any_weighted = any(flag for _, flag in everyone)
    sub = comm.Dup()
    return Distgraphcomm(sub._engine, sub._group, sub._ctx, [s for s, _ in ins], [d for d, _ in outs],
                         ([w for _, w in ins], [w for _, w in outs]) if any_weighted else None)


class Distgraphcomm(Topocomm):
    """Communicator with a distributed graph topology (Create_dist_graph, Create_dist_graph_adjacent)."""
    _kinds = (DIST_GRAPH,)
    topology = DIST_GRAPH

    def __init__(self, engine=None, group=(), context: int = 0, sources: list[int] = (), destinations: list[int] = (),
                 weights: tuple[list[int], list[int]] | None = None, name: str = "") -> None:
        if isinstance(engine, Comm):
            return  # a handle on an existing communicator (see Comm.__new__)
        super().__init__(engine, group, context, name)
        self._sources, self._destinations, self._weights = list(sources), list(destinations), weights

    def Get_topology(self) -> int:
        """
        Return the topology type: DIST_GRAPH."""
        self._live()
        return DIST_GRAPH

    def _with_topology(self, context: int) -> Distgraphcomm:
        return Distgraphcomm(self._engine, self._group, context, self._sources, self._destinations, self._weights)

    def _neighbor_lists(self) -> tuple[list[int], list[int], list[int]]:
        return self._sources, self._destinations, list(range(len(self._sources)))

    def Get_dist_neighbors_count(self) -> tuple[int, int, bool]:
        """
        Return (number of sources, number of destinations, whether the graph is weighted)."""
        return len(self._sources), len(self._destinations), self._weights is not None

    def Get_dist_neighbors(self) -> tuple[list[int], list[int], tuple[list[int], list[int]] | None]:
        """
        Return (sources, destinations, (source weights, destination weights) or None)."""
        weights = None if self._weights is None else (list(self._weights[0]), list(self._weights[1]))
        return list(self._sources), list(self._destinations), weights
