"""Uppercase collectives of intracommunicators: their plans (buffers and numpy arrays, message specs, ``MPI.IN_PLACE``).

Each call is split in two: a *plan* parses the message specs, checks them
(the way mpi4py does, with the same ``ValueError`` texts) and wraps the
user's memory as byte views and arrays without copying; it returns a
function of a ``Channel`` that runs the algorithm ``collectives.table``
picks. The entry points, shared with intercommunicators, are in
``collective_entries``: the blocking call runs the plan at once; its ``I``
twin hands the plan to the communicator's background worker and returns a
``Request``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..collectives import allgather_recursive_doubling, server_side, table
from ..collectives.channel import Channel
from ..collectives.options import (
    AllgatherOptions,
    AllreduceOptions,
    BcastOptions,
    GatherOptions,
    Layout,
    ReduceOptions,
    ReduceScatterOptions,
    ScanOptions,
    ScatterOptions,
)
from . import collspecs as specs
from .collective_entries import BufferCollectiveEntries
from .collective_exchange import ExchangeCollectives, Plan, finishing
from .op import SUM, Op
from .persistent import PersistentCollectives
from .repeated_calls import AllreduceMemo
from .request import Request


def _check_same(send: specs.Simple, recv: specs.Simple, what: str = "receive count") -> None:
    if send.datatype.dtype != recv.datatype.dtype:
        raise ValueError("mismatch in send and receive MPI datatypes")
    if send.count != recv.count:
        raise ValueError(f"mismatch in send count {send.count} and {what} {recv.count}")


def _reduction_arrays(self, sendbuf: Any, recvbuf: Any, op: Op) -> tuple[np.ndarray, np.ndarray, Callable, specs.Simple]:
    """(send, recv, combine, the receive spec) for Allreduce/Scan/Exscan; in place: send *is* recv."""
    if not isinstance(op, Op):
        raise TypeError(f"op must be an MPI.Op, not {type(op).__name__}")
    recv = specs.simple(recvbuf, True)
    if specs.in_place(sendbuf):
        send_arr = recv_arr = recv.array()
    else:
        send = specs.simple(sendbuf, False)
        _check_same(send, recv)
        send_arr, recv_arr = send.array(), recv.array()
    op.check(recv.datatype.dtype, recv.datatype.name)
    return send_arr, recv_arr, op.reducer(recv.datatype), recv


class BufferCollectives(ExchangeCollectives, BufferCollectiveEntries, PersistentCollectives):
    """Mixed into ``Intracomm`` (the alltoall family is in ``collective_exchange``, the entry points in
    ``collective_entries``); needs ``_blocking``, ``_nonblocking``, ``_root``, ``rank``, ``size``,
    and ``_allreduce_memo`` (None at first: see ``repeated_calls``)."""

    _allreduce_memo: AllreduceMemo | None

    # ---------------------------------------------------------------- barrier
    def _plan_barrier(self) -> Plan:
        return lambda ch: table.run("barrier", ch, None, 0)

    # ------------------------------------------------------------------ bcast
    def _plan_bcast(self, buf: Any, root: int) -> Plan:
        root = self._root(root)
        msg = specs.simple(buf, self.rank != root)
        data = msg.data()
        segment = table.tuning().segment
        return finishing(lambda ch: table.run("bcast", ch, BcastOptions(data, root, segment), len(data)), msg)

    # ---------------------------------------------------------- reduce family
    def _plan_reduce(self, sendbuf: Any, recvbuf: Any, op: Op, root: int) -> Plan:
        root = self._root(root)
        spec = None
        if self.rank == root:
            send, recv, combine, spec = _reduction_arrays(self, sendbuf, recvbuf, op)
        else:
            if not isinstance(op, Op):
                raise TypeError(f"op must be an MPI.Op, not {type(op).__name__}")
            msg = specs.simple(sendbuf, False)
            op.check(msg.datatype.dtype, msg.datatype.name)
            send, recv, combine = msg.array(), None, op.reducer(msg.datatype)
        opts = ReduceOptions(send, recv, combine, op.commute, root, table.tuning().segment)
        return finishing(lambda ch: table.run("reduce", ch, opts, send.nbytes, op.commute), spec)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """
        Combine the buffers of all members with `op` and leave the result in every member's `recvbuf`."""
        # Not the shared entry point's plan: a loop's repeated blocking Allreduce reuses its checked arguments.
        memo = self._allreduce_memo
        if memo is None or not memo.fits(sendbuf, recvbuf, op):
            opts, spec = self._allreduce_options(sendbuf, recvbuf, op)
            if not AllreduceMemo.worth_it(sendbuf, recvbuf, opts):
                self._blocking(finishing(lambda ch: table.run("allreduce", ch, opts, opts.recv.nbytes, opts.commute), spec))
                return
            memo = self._allreduce_memo = AllreduceMemo(sendbuf, recvbuf, op, opts)
        self._blocking(memo.run)

    def _plan_allreduce(self, sendbuf: Any, recvbuf: Any, op: Op) -> Plan:
        opts, spec = self._allreduce_options(sendbuf, recvbuf, op)
        return finishing(lambda ch: table.run("allreduce", ch, opts, opts.recv.nbytes, opts.commute), spec)

    def _allreduce_options(self, sendbuf: Any, recvbuf: Any, op: Op) -> tuple[AllreduceOptions, specs.Simple]:
        send, recv, combine, spec = _reduction_arrays(self, sendbuf, recvbuf, op)
        return AllreduceOptions(send, recv, combine, op.commute, table.tuning().segment, server_side.server_op(op)), spec

    def Scan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """
        Leave in each member's `recvbuf` the `op` reduction of the buffers of members up to its rank (inclusive)."""
        self._blocking(self._plan_scan(sendbuf, recvbuf, op, False))

    def Iscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        """
        Start a Scan and return its Request."""
        return self._nonblocking(self._plan_scan(sendbuf, recvbuf, op, False))

    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """
        Leave in each member's `recvbuf` the `op` reduction of the buffers of the members below its rank."""
        self._blocking(self._plan_scan(sendbuf, recvbuf, op, True))

    def Iexscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        """
        Start an Exscan and return its Request."""
        return self._nonblocking(self._plan_scan(sendbuf, recvbuf, op, True))

    def _plan_scan(self, sendbuf: Any, recvbuf: Any, op: Op, exclusive: bool) -> Plan:
        send, recv, combine, spec = _reduction_arrays(self, sendbuf, recvbuf, op)
        opts = ScanOptions(send, recv, combine, exclusive)
        return finishing(lambda ch: table.run("scan", ch, opts, recv.nbytes, op.commute), spec)

    def _plan_reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op) -> Plan:
        if not isinstance(op, Op):
            raise TypeError(f"op must be an MPI.Op, not {type(op).__name__}")
        size = self.size
        if specs.in_place(sendbuf):
            recv = specs.simple(recvbuf, True, size)
            full = recv.array(size)
            send_arr, recv_arr, scratch = full, full[: recv.count], True
        else:
            recv = specs.simple(recvbuf, True)
            send = specs.simple(sendbuf, False, size)
            if send.datatype.dtype != recv.datatype.dtype:
                raise ValueError("mismatch in send and receive MPI datatypes")
            if send.count != recv.count:
                raise ValueError(f"mismatch in send count {send.count} and receive count {recv.count * size}")
            send_arr, recv_arr, scratch = send.array(size), recv.array(), False
        op.check(recv.datatype.dtype, recv.datatype.name)
        opts = ReduceScatterOptions(
            send_arr, recv_arr, [recv.count] * size, op.reducer(recv.datatype), op.commute, table.tuning().segment, scratch
        )
        return finishing(lambda ch: table.run("reduce_scatter", ch, opts, send_arr.nbytes, op.commute), recv)

    def _plan_reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any, op: Op) -> Plan:
        if not isinstance(op, Op):
            raise TypeError(f"op must be an MPI.Op, not {type(op).__name__}")
        size, rank = self.size, self.rank
        recv = specs.simple(recvbuf, True)
        op.check(recv.datatype.dtype, recv.datatype.name)
        combine, segment = op.reducer(recv.datatype), table.tuning().segment
        in_place = specs.in_place(sendbuf)
        if in_place:
            if recvcounts is None:
                raise ValueError("Reduce_scatter with IN_PLACE needs recvcounts")
            send = recv
        else:
            send = specs.simple(sendbuf, False)
            if send.datatype.dtype != recv.datatype.dtype:
                raise ValueError("mismatch in send and receive MPI datatypes")
        given = None if recvcounts is None else [int(c) for c in recvcounts]
        if given is not None and len(given) != size:
            raise ValueError(f"expecting {size} recvcounts, got {len(given)}")

        def check(counts: list[int]) -> None:
            total = sum(counts)
            if in_place:
                if recv.count != total:
                    raise ValueError(f"mismatch in receive count {recv.count} and sum(counts) {total}")
            else:
                if send.count != total:
                    raise ValueError(f"mismatch in send count {send.count} and sum(counts) {total}")
                if recv.count != counts[rank]:
                    raise ValueError(f"mismatch in receive count {recv.count} and counts[{rank}] {counts[rank]}")

        if given is not None:
            check(given)

        def run(ch: Channel) -> None:
            counts = given
            if counts is None:  # as mpi4py: every rank's receive count, gathered first
                gathered = np.empty(size, dtype=np.int64)
                gathered[rank] = recv.count
                allgather_recursive_doubling.allgather(
                    ch, AllgatherOptions(memoryview(gathered.view(np.uint8)), Layout.even(size, 8), segment)
                )
                counts = [int(c) for c in gathered]
                check(counts)
            send_arr = send.array()
            recv_arr = send_arr[: counts[rank]] if in_place else recv.array()
            opts = ReduceScatterOptions(send_arr, recv_arr, counts, combine, op.commute, segment, in_place)
            table.run("reduce_scatter", ch, opts, send_arr.nbytes, op.commute)

        return finishing(run, recv)

    # ---------------------------------------------------------- gather family
    def _plan_gather(self, sendbuf: Any, recvbuf: Any, root: int, v: bool) -> Plan:
        root = self._root(root)
        size = self.size
        spec = None
        if self.rank == root:
            if v:
                spec = rv = specs.vector(recvbuf, True, size)
                recv, layout, block = rv.view, rv.layout, -1
            else:
                spec = rb = specs.simple(recvbuf, True, size)
                recv, block = rb.data(size), rb.nbytes
                layout = Layout.even(size, block)
            send = None if specs.in_place(sendbuf) else specs.simple(sendbuf, False).data()
            if send is not None and len(send) != layout.lengths[root]:
                raise ValueError(f"mismatch in send size {len(send)} and receive size {layout.lengths[root]} (bytes)")
        else:
            send = specs.simple(sendbuf, False).data()
            recv, layout, block = None, None, (-1 if v else len(send))
        opts = GatherOptions(send, recv, layout, block, root)
        total = block * size if block >= 0 else -1
        return finishing(lambda ch: table.run("gather", ch, opts, total, equal_blocks=not v), spec)

    def _plan_scatter(self, sendbuf: Any, recvbuf: Any, root: int, v: bool) -> Plan:
        root = self._root(root)
        size = self.size
        if self.rank == root:
            if v:
                sv = specs.vector(sendbuf, False, size)
                send, layout, block = sv.view, sv.layout, -1
            else:
                sb = specs.simple(sendbuf, False, size)
                send, block = sb.data(size), sb.nbytes
                layout = Layout.even(size, block)
            spec = None if specs.in_place(recvbuf) else specs.simple(recvbuf, True)
            recv = None if spec is None else spec.data()
            if recv is not None and len(recv) != layout.lengths[root]:
                raise ValueError(f"mismatch in send size {layout.lengths[root]} and receive size {len(recv)} (bytes)")
        else:
            spec = specs.simple(recvbuf, True)
            recv = spec.data()
            send, layout, block = None, None, (-1 if v else len(recv))
        opts = ScatterOptions(send, layout, recv, block, root)
        total = block * size if block >= 0 else -1
        return finishing(lambda ch: table.run("scatter", ch, opts, total, equal_blocks=not v), spec)

    def _plan_allgather(self, sendbuf: Any, recvbuf: Any, v: bool) -> Plan:
        size, rank = self.size, self.rank
        if v:
            spec = rv = specs.vector(recvbuf, True, size)
            buf, layout = rv.view, rv.layout
        else:
            spec = rb = specs.simple(recvbuf, True, size)
            buf, layout = rb.data(size), Layout.even(size, rb.nbytes)
        send = None
        if not specs.in_place(sendbuf):
            send = specs.simple(sendbuf, False).data()
            if len(send) != layout.lengths[rank]:
                raise ValueError(f"mismatch in send size {len(send)} and receive size {layout.lengths[rank]} (bytes)")
        opts = AllgatherOptions(buf, layout, table.tuning().segment)
        total = sum(layout.lengths)

        def run(ch: Channel) -> None:
            if send is not None:
                layout.view(buf, rank)[:] = send
            table.run("allgather", ch, opts, total)

        return finishing(run, spec)
