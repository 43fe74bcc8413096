"""Process topologies: ``Topocomm`` (what every topology has: neighbours, neighborhood
collectives), Cartesian ones (``MPI.Compute_dims``, ``Create_cart``, ``Cartcomm``,
``Cart_map``); graphs are in ``graph_topology``.

``compute_dims`` picks the most balanced grid, as MPICH's MPI_Dims_create
does, so programs that size their domain from it decompose the same way under
fmpi and under real MPI. ``reorder`` is accepted and ignored (MPI allows it):
ranks keep their order, so ``Cart_map``/``Graph_map`` give a rank its own.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

from . import exceptions as err
from .comm import Comm
from .constants import PROC_NULL, UNDEFINED
from .intracomm import Intracomm
from .neighbor import NeighborCollectives


def compute_dims(nnodes: int, dims: int | Sequence[int]) -> list[int]:
    """Factor `nnodes` into len(dims) factors, non-increasing, as balanced as possible.

    Entries of `dims` that are non-zero are fixed; zeros are chosen.
    """
    fixed = [0] * dims if isinstance(dims, int) else [int(d) for d in dims]
    if nnodes < 1 or any(d < 0 for d in fixed):
        raise err.Exception(err.ERR_ARG, f"cannot split {nnodes} processes into dims {fixed}")
    product = 1
    for d in fixed:
        product *= d or 1
    free = fixed.count(0)
    if nnodes % product or (free == 0 and product != nnodes):
        raise err.Exception(err.ERR_ARG, f"{nnodes} processes do not fit dims {fixed}")
    chosen = iter(_balanced(nnodes // product, free))
    return [d or next(chosen) for d in fixed]


@lru_cache(maxsize=256)
def _balanced(n: int, k: int) -> tuple[int, ...]:
    """The non-increasing k-tuple with product n whose largest/smallest spread is least."""
    if k == 0:
        return ()
    best: tuple[int, ...] | None = None
    for candidate in _factorizations(n, k, n):
        if best is None or (candidate[0] - candidate[-1], candidate) < (best[0] - best[-1], best):
            best = candidate
    return best


def _factorizations(n: int, k: int, limit: int):
    """Non-increasing k-tuples of factors <= limit whose product is n."""
    if k == 1:
        if n <= limit:
            yield (n,)
        return
    for first in range(min(n, limit), 0, -1):
        if n % first == 0 and first ** k >= n:  # the first factor is the largest
            for rest in _factorizations(n // first, k - 1, first):
                yield (first, *rest)


GRAPH, CART, DIST_GRAPH = 1, 2, 3  # MPICH's values of the topology kinds


class Topocomm(NeighborCollectives, Intracomm):
    """A communicator with a process topology; ``MPI.Topocomm(comm)`` needs one of `_kinds`."""

    _kinds: tuple[int, ...] = (CART, GRAPH, DIST_GRAPH)

    def __new__(cls, comm: Comm | None = None, *args: Any, **kwargs: Any):
        if isinstance(comm, Comm) and comm and comm.Get_topology() not in cls._kinds:  # a null one is any kind
            raise TypeError(f"{type(comm).__name__} is not a {cls.__name__}")
        return super().__new__(cls, comm, *args, **kwargs)

    def _dup_child(self, context: int) -> Topocomm:
        """Dup (and Clone) keep the topology and the class, as MPI_Comm_dup and mpi4py's Dup do."""
        child = self._with_topology(context)
        child._errhandler = self._errhandler
        return child

    def _with_topology(self, context: int) -> Topocomm:
        """A communicator on this one's group, with this one's topology, in `context`."""
        raise NotImplementedError

    @property
    def is_topo(self) -> bool:
        return True

    @property
    def degrees(self) -> tuple[int, int]:
        sources, destinations, _ = self._neighbor_lists()
        return len(sources), len(destinations)

    @property
    def indegree(self) -> int:
        return self.degrees[0]

    @property
    def outdegree(self) -> int:
        return self.degrees[1]

    @property
    def inoutedges(self) -> tuple[list[int], list[int]]:
        sources, destinations, _ = self._neighbor_lists()
        return list(sources), list(destinations)

    @property
    def inedges(self) -> list[int]:
        return self.inoutedges[0]

    @property
    def outedges(self) -> list[int]:
        return self.inoutedges[1]


def _periods(periods: Any, ndims: int) -> list[bool]:
    if periods is None or isinstance(periods, (bool, int)):
        return [bool(periods)] * ndims
    periods = [bool(p) for p in periods]
    if len(periods) != ndims:
        raise ValueError(f"expecting {ndims} periods, got {len(periods)}")
    return periods


def create_cart(comm, dims: Sequence[int], periods: Any = None, reorder: bool = False):
    """``comm.Create_cart``: the first prod(dims) ranks form the grid (row-major); the rest get COMM_NULL (None)."""
    dims = [int(d) for d in dims]
    periods = _periods(periods, len(dims))
    if any(d < 1 for d in dims):
        raise err.Exception(err.ERR_ARG, f"invalid Cartesian grid dims={dims} periods={periods}")
    cells = cart_cells(comm, dims)
    sub = comm.Split(0 if comm.rank < cells else UNDEFINED, comm.rank)
    if sub is None:
        return None
    return Cartcomm(sub._engine, sub._group, sub._ctx, dims, periods)


def cart_cells(comm, dims: Sequence[int]) -> int:
    cells = 1
    for d in dims:
        cells *= int(d)
    if cells > comm.size:
        raise err.Exception(err.ERR_ARG, f"a {'x'.join(map(str, dims))} grid needs {cells} ranks; the communicator has {comm.size}")
    return cells


def cart_map(comm, dims: Sequence[int], periods: Any = None) -> int:
    """``comm.Cart_map``: the rank this process would have in the grid (UNDEFINED: none)."""
    cells = cart_cells(comm, dims)
    return comm.rank if comm.rank < cells else UNDEFINED


class Cartcomm(Topocomm):
    """A communicator whose ranks sit on a Cartesian grid (row-major, as in MPI)."""

    _kinds = (CART,)

    def __init__(self, engine=None, group=(), context: int = 0, dims: list[int] = (), periods: list[bool] = (), name: str = "") -> None:
        if isinstance(engine, Comm):
            return  # a handle on an existing communicator (see Comm.__new__)
        super().__init__(engine, group, context, name)
        self._dims = list(dims)
        self._periods = [bool(p) for p in periods]

    topology = CART

    def _with_topology(self, context: int) -> Cartcomm:
        return Cartcomm(self._engine, self._group, context, self._dims, self._periods)

    @property
    def dims(self) -> list[int]:
        return list(self._dims)

    @property
    def periods(self) -> list[int]:
        return [int(p) for p in self._periods]

    def _neighbor_lists(self) -> tuple[list[int], list[int], list[int]]:
        """Per dimension the -1 then the +1 neighbour, both ways; receives posted +1 first: see ``Neighbor_*``."""
        edges: list[int] = []
        order: list[int] = []
        for d in range(len(self._dims)):
            edges.extend(self.Shift(d, 1))
            order.extend((2 * d + 1, 2 * d))  # the +1 neighbour's first message to us was sent towards its -1
        return edges, edges, order

    def Get_topology(self) -> int:
        """
        Return the topology type: CART."""
        self._live()
        return CART

    def Get_dim(self) -> int:
        """
        Return the number of dimensions of the grid."""
        return len(self._dims)

    @property
    def ndim(self) -> int:
        return len(self._dims)

    dim = ndim

    def Get_topo(self) -> tuple[list[int], list[int], list[int]]:
        """
        Return (dims, periods, this process's coordinates)."""
        return list(self._dims), [int(p) for p in self._periods], self.Get_coords(self.rank)
    @property
    def topo(self) -> tuple[list[int], list[int], list[int]]:
        return self.Get_topo()

    @property
    def coords(self) -> list[int]:
        return self.Get_coords(self.rank)

    def Get_coords(self, rank: int) -> list[int]:
        """
        Return the grid coordinates of `rank`."""
        if not 0 <= rank < self.size:
            raise err.Exception(err.ERR_RANK, f"invalid rank {rank} for a grid of {self.size}")
        coords = []
        for d in reversed(self._dims):
            coords.append(rank % d)
            rank //= d
        return coords[::-1]

    def Get_cart_rank(self, coords: Sequence[int]) -> int:
        """
        Return the rank at grid coordinates `coords`."""
        rank = 0
        if len(coords) != len(self._dims):
            raise err.Exception(err.ERR_ARG, f"coordinates {list(coords)} do not fit the grid {self._dims}")
        for c, d, periodic in zip(coords, self._dims, self._periods):
            if periodic:
                c %= d
            elif not 0 <= c < d:
                raise err.Exception(err.ERR_ARG, f"coordinates {list(coords)} are off the grid {self.dims}")
            rank = rank * d + c
        return rank

    def Shift(self, direction: int, disp: int) -> tuple[int, int]:
        """
        Return (source, dest) for a shift by `disp` along `direction`; PROC_NULL off a non-periodic edge."""

        if not 0 <= direction < len(self._dims):
            raise err.Exception(err.ERR_ARG, f"direction {direction} is not a dimension of {self._dims}")
        here = self.coords

        def neighbour(offset: int) -> int:
            coords = list(here)
            coords[direction] += offset
            d = self._dims[direction]
            if not self._periods[direction] and not 0 <= coords[direction] < d:
                return PROC_NULL
            return self.Get_cart_rank(coords)

        return neighbour(-disp), neighbour(disp)

    def Sub(self, remain_dims: Sequence[bool]) -> "Cartcomm":
        """
        Split the grid into sub-grids that keep the dimensions marked True (one per combination of the others)."""
        keep = [bool(r) for r in remain_dims]
        coords = self.coords
        color = 0
        for c, d, k in zip(coords, self._dims, keep):
            if not k:
                color = color * d + c
        sub = self.Split(color, self.rank)
        dims = [d for d, k in zip(self._dims, keep) if k]
        periods = [p for p, k in zip(self._periods, keep) if k]
        return Cartcomm(sub._engine, sub._group, sub._ctx, dims, periods)
