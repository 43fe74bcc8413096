"""Neighborhood collectives of process topologies (mixed into ``Topocomm``): ``Neighbor_allgather(v)``,
``Neighbor_alltoall(v/w)``, their ``I`` twins and the lowercase ``neighbor_allgather``/``neighbor_alltoall``.

A topology gives its in-neighbours (``sources``), its out-neighbours
(``destinations``) and the order in which to post the receives
(``_neighbor_lists``); block i of the receive buffer holds what ``sources[i]``
sent, block j of the send buffer goes to ``destinations[j]``. A Cartesian
topology lists, per dimension, the neighbour at -1 then the one at +1 (both
ways); a message sent towards +1 lands in the receiver's -1 block.
"""

from __future__ import annotations

from typing import Any

from ..collectives import neighbor_exchange
from ..collectives.channel import Channel
from ..wire import pickle_oob as serialize
from . import collspecs as specs
from .collective_exchange import Plan, blocks_of, finishing
from .persistent import PersistentNeighborCollectives
from .request import Request


class NeighborCollectives(PersistentNeighborCollectives):
    """Needs ``_neighbor_lists``, ``_blocking``, ``_nonblocking`` and ``_collective``."""

    def _neighbor_lists(self) -> tuple[list[int], list[int], list[int]]:
        raise NotImplementedError  # (each topology defines it)

    # ------------------------------------------------------------ buffers
    def Neighbor_allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        self._blocking(self._plan_neighbor(sendbuf, recvbuf, "even", True))

    def Ineighbor_allgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._nonblocking(self._plan_neighbor(sendbuf, recvbuf, "even", True))

    def Neighbor_allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._blocking(self._plan_neighbor(sendbuf, recvbuf, "v", True))

    def Ineighbor_allgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._nonblocking(self._plan_neighbor(sendbuf, recvbuf, "v", True))

    def Neighbor_alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        self._blocking(self._plan_neighbor(sendbuf, recvbuf, "even", False))

    def Ineighbor_alltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._nonblocking(self._plan_neighbor(sendbuf, recvbuf, "even", False))

    def Neighbor_alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._blocking(self._plan_neighbor(sendbuf, recvbuf, "v", False))

    def Ineighbor_alltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._nonblocking(self._plan_neighbor(sendbuf, recvbuf, "v", False))

    def Neighbor_alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        self._blocking(self._plan_neighbor(sendbuf, recvbuf, "w", False))

    def Ineighbor_alltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._nonblocking(self._plan_neighbor(sendbuf, recvbuf, "w", False))

    def _plan_neighbor(self, sendbuf: Any, recvbuf: Any, kind: str, gather: bool) -> Plan:
        sources, destinations, order = self._neighbor_lists()
        recv_spec, recv, rlayout = blocks_of(recvbuf, True, len(sources), kind)
        if gather:  # the one send block goes to every out-neighbour
            data = specs.simple(sendbuf, False).data()
            outgoing = [[data]] * len(destinations)
        else:
            _, send, slayout = blocks_of(sendbuf, False, len(destinations), kind)
            outgoing = [[slayout.view(send, j)] for j in range(len(destinations))]
        sends = list(zip(destinations, outgoing))
        recvs = [(sources[i], rlayout.view(recv, i)) for i in order]
        return finishing(lambda ch: neighbor_exchange.exchange(ch, sends, recvs), recv_spec)

    # ------------------------------------------------------------ objects
    def neighbor_allgather(self, sendobj: Any) -> list[Any]:
        sources, destinations, _ = self._neighbor_lists()
        parts = serialize.dumps(sendobj)
        return self._objects([parts] * len(destinations))

    def neighbor_alltoall(self, sendobj: Any) -> list[Any]:
        sources, destinations, _ = self._neighbor_lists()
        items = [None] * len(destinations) if sendobj is None else list(sendobj)
        if len(items) != len(destinations):
            raise ValueError(f"expecting {len(destinations)} items, got {len(items)}")
        return self._objects([serialize.dumps(item) for item in items])

    def _objects(self, outgoing: list[list[memoryview]]) -> list[Any]:
        sources, destinations, order = self._neighbor_lists()

        def run(ch: Channel) -> list:
            return neighbor_exchange.exchange(ch, list(zip(destinations, outgoing)), [(sources[i], None) for i in order])

        ops = self._collective(run)
        values: list[Any] = [None] * len(sources)
        for i, op in zip(order, ops):
            if op is not None:
                values[i] = serialize.loads(op.payload)
        return values
