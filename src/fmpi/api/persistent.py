"""Persistent requests: ``Comm.Send_init``/``Recv_init`` (and the Bsend/Ssend/Rsend kinds), the
persistent collectives (``Bcast_init``, ``Allreduce_init``, ``Neighbor_alltoall_init``, ...), and
``Prequest.Start``/``Startall`` — the halo-exchange loop's way to set a transfer up once.

A persistent request remembers how to start its operation; each ``Start`` begins
one more run of it (a fresh transport operation on the same buffer; for a
collective, its non-blocking form, so every rank must start its persistent
collectives in the same order, as MPI requires), after which
the usual ``Wait``/``Test`` calls complete it. Between runs it is inactive: waiting
on it returns at once, and it stays a live handle until ``Free``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import exceptions as err
from .constants import ANY_SOURCE, ANY_TAG
from .info import Info
from .request import Request


class Prequest(Request):
    """Persistent request: a communication set up once and started many times."""
    __slots__ = ("_begin", "_freed")

    def __init__(self, begin: Callable[[], Request] | Request | None = None) -> None:
        if isinstance(begin, Request):  # MPI.Prequest(req): another handle on the same persistent request
            if begin and not isinstance(begin, Prequest):
                raise TypeError("expecting a persistent request")
            super().__init__(begin)
            self._begin = begin._begin if isinstance(begin, Prequest) else None
            self._freed = not begin
            return
        if begin is not None and not callable(begin):
            raise TypeError(f"expecting a request, not {type(begin).__name__}")
        super().__init__()
        self._begin = begin
        self._freed = begin is None

    def Start(self) -> None:
        """
        Start the communication; the request is then active until a wait or test completes it."""
        if self._freed or self._begin is None:
            raise err.Exception(err.ERR_REQUEST, "Start on a freed persistent request")
        if self._op is not None:
            raise err.Exception(err.ERR_REQUEST, "Start on a persistent request that is still active")
        run = self._begin()
        # This handle becomes the run's request: Wait/Test/Waitall... see it as any other.
        self._engine, self._op, self._finish = run._engine, run._op, run._finish
        self._result, self._settled = run._result, run._settled

    start = Start

    @classmethod
    def Startall(cls, requests: Sequence[Prequest]) -> None:
        """
        Start every request of `requests`."""
        for request in requests:
            request.Start()

    startall = Startall

    def Free(self) -> None:
        """
        Free the persistent request: the handle becomes null."""
        if self._freed:
            raise err.Exception(err.ERR_REQUEST, "Free on a null request (REQUEST_NULL)")
        self._op = None
        self._settled = self._freed = True

    def __bool__(self) -> bool:
        """A persistent request is a live handle, active or not, until freed."""
        return not self._freed


class PersistentP2P:
    """The ``*_init`` calls of ``Comm`` (mixed into it)."""

    def Send_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        return Prequest(lambda: self.Isend(buf, dest, tag))

    Bsend_init = Rsend_init = Send_init

    def Ssend_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        return Prequest(lambda: self.Issend(buf, dest, tag))

    def Recv_init(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Prequest:
        return Prequest(lambda: self.Irecv(buf, source, tag))


def _persistent(name: str) -> Callable[..., Prequest]:
    """``<name>_init``: a persistent request whose every Start runs ``I<name>`` with the same arguments."""
    nonblocking = "I" + name[0].lower() + name[1:]

    def init(self: Any, *args: Any, info: Any = None, **kwargs: Any) -> Prequest:
        if args and isinstance(args[-1], Info):  # the info hint, passed by position (ignored)
            args = args[:-1]
        start = getattr(self, nonblocking)
        return Prequest(lambda: start(*args, **kwargs))

    init.__name__ = init.__qualname__ = f"{name}_init"
    init.__doc__ = f"Persistent {name}: each Start runs {nonblocking} with these arguments."
    return init


class PersistentCollectives:
    """``<collective>_init`` of every collective with a non-blocking form (mixed into ``Intracomm``)."""


class PersistentNeighborCollectives:
    """``Neighbor_*_init`` (mixed into ``Topocomm``)."""


for _name in ("Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall",
              "Alltoallv", "Alltoallw", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter", "Scan", "Exscan"):
    setattr(PersistentCollectives, f"{_name}_init", _persistent(_name))
for _name in ("Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv", "Neighbor_alltoallw"):
    setattr(PersistentNeighborCollectives, f"{_name}_init", _persistent(_name))
