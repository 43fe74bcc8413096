"""The uppercase buffer collectives' entry points, shared by ``Intracomm`` and ``Intercomm``.

Every call is its plan run at once (blocking) or handed to the background worker
(the ``I`` twin, which returns a ``Request``); only the plans differ between the
two kinds of communicator (``collective_buffers`` and ``collective_exchange`` for
intracommunicators, ``intercomm_buffers`` for intercommunicators), so the
signatures and defaults, which are mpi4py's, are written once, here. What a kind
does differently (an intracommunicator's remembered Allreduce, its Scan and
Alltoallw; an intercommunicator's refusals) it defines itself.
"""

from __future__ import annotations

from typing import Any

from .op import SUM, Op
from .request import Request


class BufferCollectiveEntries:
    """Needs ``_blocking``, ``_nonblocking`` and a ``_plan_<call>`` for each call below."""

    # ---------------------------------------------------------------- barrier
    def Barrier(self) -> None:
        """
        Wait until every member of the communicator has called Barrier."""
        self._blocking(self._plan_barrier())

    def Ibarrier(self) -> Request:
        """
        Start a barrier and return its Request, which completes once every member has started it."""
        return self._nonblocking(self._plan_barrier())

    # ------------------------------------------------------------------ bcast
    def Bcast(self, buf: Any, root: int = 0) -> None:
        """
        Broadcast `buf` from `root` to every other member."""
        self._blocking(self._plan_bcast(buf, root))

    def Ibcast(self, buf: Any, root: int = 0) -> Request:
        """
        Start a Bcast and return its Request."""
        return self._nonblocking(self._plan_bcast(buf, root))

    # ---------------------------------------------------- gather and scatter
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """
        Gather every member's `sendbuf` into `recvbuf` at `root`, in rank order."""
        self._blocking(self._plan_gather(sendbuf, recvbuf, root, False))

    def Igather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """
        Start a Gather and return its Request."""
        return self._nonblocking(self._plan_gather(sendbuf, recvbuf, root, False))

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """
        Gather every member's `sendbuf` into `recvbuf` at `root`, with a count and displacement per member."""
        self._blocking(self._plan_gather(sendbuf, recvbuf, root, True))

    def Igatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """
        Start a Gatherv and return its Request."""
        return self._nonblocking(self._plan_gather(sendbuf, recvbuf, root, True))

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """
        Scatter equal parts of `sendbuf` at `root` into the members' `recvbuf`, in rank order."""
        self._blocking(self._plan_scatter(sendbuf, recvbuf, root, False))

    def Iscatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """
        Start a Scatter and return its Request."""
        return self._nonblocking(self._plan_scatter(sendbuf, recvbuf, root, False))

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """
        Scatter parts of `sendbuf` at `root` to the members, with a count and displacement per member."""
        self._blocking(self._plan_scatter(sendbuf, recvbuf, root, True))

    def Iscatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        """
        Start a Scatterv and return its Request."""
        return self._nonblocking(self._plan_scatter(sendbuf, recvbuf, root, True))

    # ----------------------------------------------- allgather and alltoall
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """
        Gather every member's `sendbuf` into every member's `recvbuf`, in rank order."""
        self._blocking(self._plan_allgather(sendbuf, recvbuf, False))

    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        """
        Start an Allgather and return its Request."""
        return self._nonblocking(self._plan_allgather(sendbuf, recvbuf, False))

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        """
        Gather every member's `sendbuf` into every member's `recvbuf`, with a count and displacement per member."""
        self._blocking(self._plan_allgather(sendbuf, recvbuf, True))

    def Iallgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """
        Start an Allgatherv and return its Request."""
        return self._nonblocking(self._plan_allgather(sendbuf, recvbuf, True))

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """
        Send the i-th equal part of `sendbuf` to member i and receive member i's part into the i-th of `recvbuf`."""
        self._blocking(self._plan_alltoall(sendbuf, recvbuf, "even"))

    def Ialltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        """
        Start an Alltoall and return its Request."""
        return self._nonblocking(self._plan_alltoall(sendbuf, recvbuf, "even"))

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        """
        Exchange parts of the buffers between all members, with counts and displacements per member."""
        self._blocking(self._plan_alltoall(sendbuf, recvbuf, "v"))

    def Ialltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """
        Start an Alltoallv and return its Request."""
        return self._nonblocking(self._plan_alltoall(sendbuf, recvbuf, "v"))

    # ------------------------------------------------------------- reductions
    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0) -> None:
        """
        Combine the buffers of all members with `op` into `recvbuf` at `root`."""
        self._blocking(self._plan_reduce(sendbuf, recvbuf, op, root))

    def Ireduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0) -> Request:
        """
        Start a Reduce and return its Request."""
        return self._nonblocking(self._plan_reduce(sendbuf, recvbuf, op, root))

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        self._blocking(self._plan_allreduce(sendbuf, recvbuf, op))

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        """
        Start an Allreduce and return its Request."""
        return self._nonblocking(self._plan_allreduce(sendbuf, recvbuf, op))

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """
        Combine the buffers of all members with `op` and scatter equal blocks of the result to the members."""
        self._blocking(self._plan_reduce_scatter_block(sendbuf, recvbuf, op))

    def Ireduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        """
        Start a Reduce_scatter_block and return its Request."""
        return self._nonblocking(self._plan_reduce_scatter_block(sendbuf, recvbuf, op))

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Op = SUM) -> None:
        """
        Combine the buffers of all members with `op` and scatter the result, `recvcounts[i]` elements to member i."""
        self._blocking(self._plan_reduce_scatter(sendbuf, recvbuf, recvcounts, op))

    def Ireduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Op = SUM) -> Request:
        """
        Start a Reduce_scatter and return its Request."""
        return self._nonblocking(self._plan_reduce_scatter(sendbuf, recvbuf, recvcounts, op))
