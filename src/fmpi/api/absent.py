"""The MPI features fmpi does not provide (yet), present as names whose use raises NotImplementedError.

That is what mpi4py does over an MPI library that lacks a feature, and what
programs, libraries and mpi4py's own test suite check for ("feature absent":
they skip it) — where a missing name would stop them at import with an
AttributeError. Covered: one-sided communication (``Win``), MPI-IO (``File``),
sessions, graph topologies, neighborhood and persistent collectives,
partitioned point-to-point. Importing this module attaches the methods.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .intracomm import Intracomm
from .topology import Cartcomm


def _absent(feature: str) -> NoReturn:
    raise NotImplementedError(f"{feature} is not supported by fmpi")


class _Absent:
    """A null handle of a feature fmpi lacks (WIN_NULL, FILE_NULL, SESSION_NULL): false, equal to its kind's nulls."""

    _feature = ""

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    __hash__ = object.__hash__

    def __reduce__(self) -> str:
        return f"{type(self).__name__.upper()}_NULL"


class Win(_Absent):
    @classmethod
    def Create(cls, *args: Any, **kwargs: Any) -> NoReturn:
        _absent("one-sided communication (MPI.Win)")

    Allocate = Allocate_shared = Create_dynamic = Create


class File(_Absent):
    @classmethod
    def Open(cls, *args: Any, **kwargs: Any) -> NoReturn:
        _absent("MPI-IO (MPI.File)")


class Session(_Absent):
    @classmethod
    def Init(cls, *args: Any, **kwargs: Any) -> NoReturn:
        _absent("MPI sessions (MPI.Session)")


WIN_NULL, FILE_NULL, SESSION_NULL = Win(), File(), Session()


class Topocomm(Intracomm):
    """The class exists for isinstance checks and subclasses; fmpi makes Cartesian topologies only."""


class Graphcomm(Topocomm):
    pass


class Distgraphcomm(Topocomm):
    pass


def _stub(name: str, feature: str):
    def method(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        _absent(f"{feature} ({name})")

    method.__name__ = name
    return method


_PERSISTENT = ["Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall",
               "Alltoallv", "Alltoallw", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter", "Scan", "Exscan",
               "Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv", "Neighbor_alltoallw"]
_NEIGHBOR = ["neighbor_allgather", "neighbor_alltoall", "Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall",
             "Neighbor_alltoallv", "Neighbor_alltoallw", "Ineighbor_allgather", "Ineighbor_allgatherv", "Ineighbor_alltoall",
             "Ineighbor_alltoallv", "Ineighbor_alltoallw"]

for _name in _PERSISTENT:
    setattr(Intracomm, f"{_name}_init", _stub(f"{_name}_init", "persistent collectives"))
for _name in ("Psend_init", "Precv_init"):
    setattr(Intracomm, _name, _stub(_name, "partitioned communication"))
for _name in _NEIGHBOR:
    setattr(Cartcomm, _name, _stub(_name, "neighborhood collectives"))
