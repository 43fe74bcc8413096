"""Uppercase collectives of intercommunicators: buffers move from one group to the other.

MPI's rules: in a rooted call (Bcast, Gather(v), Scatter(v), Reduce) the root
passes ``MPI.ROOT``, the rest of its group ``MPI.PROC_NULL``, and the other
group the root's rank in their remote group; data flows between the groups
only. Allgather(v) and Alltoall(v) give each process one block per remote
process; Allreduce gives each group the reduction of the other group's data,
and Reduce_scatter(_block) scatters it over the group. Scan and Exscan are
not defined on intercommunicators (``MPI.ERR_COMM``).

Algorithms, as MPICH's: rooted and all-to-all calls talk to the remote
processes directly (a send or receive per remote process); reductions first
reduce within the group to its rank 0 (the table's algorithms on the local
channel), the two rank 0s swap their results, and each group broadcasts or
scatters what it received. Plans are built as in ``collective_buffers``: the
specs are parsed in the caller's thread, the plan runs on an
``intercomm.InterChannels``, blocking or on the worker (the ``I`` twins).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from ..collectives import barrier_dissemination, table
from ..collectives.channel import as_bytes
from ..collectives.options import BcastOptions, Layout, ReduceOptions, ScatterOptions
from . import collspecs as specs
from . import exceptions as err
from .arguments import c_int
from .collective_buffers import _reduction_arrays
from .collective_entries import BufferCollectiveEntries
from .collective_exchange import blocks_of, finishing
from .constants import PROC_NULL, ROOT
from .op import Op

Plan = Callable[[Any], None]  # of an InterChannels


def _idle(ch: Any) -> None:
    """A process that takes no part (MPI.PROC_NULL as root): the call is a no-op."""


def _reduce_to_leader(ch: Any, send: np.ndarray, combine: Any, commute: bool) -> np.ndarray | None:
    """The reduction of the local group's `send` arrays, at local rank 0 (None elsewhere)."""
    if ch.local.size == 1:
        return send
    result = np.empty_like(send) if ch.leader else None
    opts = ReduceOptions(send, result, combine, commute, 0, table.tuning().segment)
    table.run("reduce", ch.local, opts, send.nbytes, commute)
    return result


def _spread(ch: Any, whole: memoryview | None, layout: Layout | None, mine: memoryview) -> None:
    """Local rank 0 scatters `whole` (placed by `layout`) over the local group; each gets `mine`."""
    opts = ScatterOptions(whole, layout, mine, -1, 0)
    table.run("scatter", ch.local, opts, -1, equal_blocks=False)


class InterBufferCollectives(BufferCollectiveEntries):
    """Mixed into ``Intercomm`` (the entry points are in ``collective_entries``); needs ``_blocking``,
    ``_nonblocking``, ``_fail``, ``size``, ``remote_size``."""

    # --------------------------------------------------------------- helpers
    def _role(self, root: int) -> int:
        """ROOT, PROC_NULL, or the root's rank in the remote group (checked)."""
        root = c_int(root)
        if root not in (ROOT, PROC_NULL) and not 0 <= root < self.remote_size:
            self._fail(err.ERR_ROOT, f"invalid root {root} for an intercommunicator whose remote group has {self.remote_size}")
        return root

    def _blocks(self, spec: Any, writable: bool, v: bool) -> tuple[memoryview, Layout]:
        """A buffer of one block per remote process: its bytes and where each block lies."""
        _, view, layout = blocks_of(spec, writable, self.remote_size, "v" if v else "even")
        return view, layout

    def _no_scan(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._fail(err.ERR_COMM, "Scan and Exscan are not defined on intercommunicators")

    Scan = Exscan = Iscan = Iexscan = scan = exscan = _no_scan

    def Alltoallw(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError("Alltoallw on intercommunicators is not supported by fmpi")

    Ialltoallw = Alltoallw

    # ---------------------------------------------------------------- barrier
    def _plan_barrier(self) -> Plan:
        def run(ch: Any) -> None:
            barrier_dissemination.barrier(ch.local)
            if ch.leader:
                ch.cross.sendrecv(ch.remote(0), [memoryview(b"")], ch.remote(0))
            barrier_dissemination.barrier(ch.local)

        return run

    # ------------------------------------------------------------------ bcast
    def _plan_bcast(self, buf: Any, root: int) -> Plan:
        root = self._role(root)
        if root == PROC_NULL:
            return _idle
        if root == ROOT:
            data = specs.simple(buf, False).data()
            return lambda ch: ch.cross.send(ch.remote(0), data)
        data = specs.simple(buf, True).data()
        opts = BcastOptions(data, 0, table.tuning().segment)

        def run(ch: Any) -> None:
            if ch.leader:
                ch.cross.recv(ch.remote(root), data)
            table.run("bcast", ch.local, opts, len(data))

        return run

    # ---------------------------------------------------- gather and scatter
    def _plan_gather(self, sendbuf: Any, recvbuf: Any, root: int, v: bool) -> Plan:
        root = self._role(root)
        if root == PROC_NULL:
            return _idle
        if root == ROOT:
            recv, layout = self._blocks(recvbuf, True, v)
            n = self.remote_size
            return lambda ch: ch.cross.waitall([ch.cross.irecv(ch.remote(i), layout.view(recv, i)) for i in range(n)])
        send = specs.simple(sendbuf, False).data()
        return lambda ch: ch.cross.send(ch.remote(root), send)

    def _plan_scatter(self, sendbuf: Any, recvbuf: Any, root: int, v: bool) -> Plan:
        root = self._role(root)
        if root == PROC_NULL:
            return _idle
        if root == ROOT:
            send, layout = self._blocks(sendbuf, False, v)
            n = self.remote_size
            return lambda ch: ch.cross.waitall([ch.cross.isend(ch.remote(i), layout.view(send, i)) for i in range(n)])
        recv = specs.simple(recvbuf, True).data()
        return lambda ch: ch.cross.recv(ch.remote(root), recv)

    # ----------------------------------------------- allgather and alltoall
    def _plan_allgather(self, sendbuf: Any, recvbuf: Any, v: bool) -> Plan:
        send = specs.simple(sendbuf, False).data()
        recv, layout = self._blocks(recvbuf, True, v)
        return self._exchange([send] * self.remote_size, recv, layout)

    def _plan_alltoall(self, sendbuf: Any, recvbuf: Any, kind: str) -> Plan:
        v = kind == "v"  # ("even" otherwise: Alltoallw is refused above)
        send, send_layout = self._blocks(sendbuf, False, v)
        recv, layout = self._blocks(recvbuf, True, v)
        return self._exchange([send_layout.view(send, i) for i in range(self.remote_size)], recv, layout)

    def _exchange(self, outgoing: list[memoryview], recv: memoryview, layout: Layout) -> Plan:
        """Send outgoing[i] to remote process i and receive its block into `recv`, for every i."""

        def run(ch: Any) -> None:
            ops = [ch.cross.irecv(ch.remote(i), layout.view(recv, i)) for i in range(len(outgoing))]
            ops += [ch.cross.isend(ch.remote(i), block) for i, block in enumerate(outgoing)]
            ch.cross.waitall(ops)

        return run

    # ------------------------------------------------------------- reductions
    def _plan_reduce(self, sendbuf: Any, recvbuf: Any, op: Op, root: int) -> Plan:
        root = self._role(root)
        if root == PROC_NULL:
            return _idle
        if root == ROOT:
            out = specs.simple(recvbuf, True).data()
            return lambda ch: ch.cross.recv(ch.remote(0), out)
        send, combine = _contribution(sendbuf, op)

        def run(ch: Any) -> None:
            result = _reduce_to_leader(ch, send, combine, op.commute)
            if ch.leader:
                ch.cross.send(ch.remote(root), as_bytes(result))

        return run

    def _plan_allreduce(self, sendbuf: Any, recvbuf: Any, op: Op) -> Plan:
        send, recv, combine, spec = _reduction_arrays(self, sendbuf, recvbuf, op)
        out = as_bytes(recv)
        opts = BcastOptions(out, 0, table.tuning().segment)

        def run(ch: Any) -> None:
            result = _reduce_to_leader(ch, send, combine, op.commute)
            if ch.leader:
                ch.cross.sendrecv(ch.remote(0), [as_bytes(result)], ch.remote(0), out)
            table.run("bcast", ch.local, opts, len(out))

        return finishing(run, spec)  # (a datatype with gaps: the result to its places)

    def _plan_reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op) -> Plan:
        return self._plan_reduce_scatter(sendbuf, recvbuf, None, op)

    def _plan_reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any, op: Op) -> Plan:
        """The reduction of the remote group's vectors, scattered over the local group: `recvcounts[i]`
        elements to local process i (None: every process's receive count, as Reduce_scatter_block)."""
        send, combine = _contribution(sendbuf, op)
        recv = specs.simple(recvbuf, True)
        if recv.datatype.dtype != send.dtype:
            raise ValueError("mismatch in send and receive MPI datatypes")
        counts = None if recvcounts is None else [int(c) for c in recvcounts]
        if counts is not None and len(counts) != self.size:
            raise ValueError(f"expecting {self.size} recvcounts, got {len(counts)}")
        if send.size != (sum(counts) if counts is not None else recv.count * self.size):  # as mpi4py checks
            per_block = send.size if counts is not None else send.size // self.size
            raise ValueError(f"mismatch in send count {per_block} and receive count {recv.count}")
        mine, itemsize = recv.data(), recv.itemsize

        def run(ch: Any) -> None:
            result = _reduce_to_leader(ch, send, combine, op.commute)
            whole = layout = None
            if ch.leader:
                lengths = [c * itemsize for c in counts] if counts else [len(mine)] * ch.local.size
                layout = Layout.packed(lengths)
                whole = memoryview(bytearray(sum(lengths)))
                ch.cross.sendrecv(ch.remote(0), [as_bytes(result)], ch.remote(0), whole)
            _spread(ch, whole, layout, mine)

        return run


def _contribution(sendbuf: Any, op: Op) -> tuple[np.ndarray, Any]:
    """(this process's operand, the op's combine function), checked as mpi4py does."""
    if not isinstance(op, Op):
        raise TypeError(f"op must be an MPI.Op, not {type(op).__name__}")
    msg = specs.simple(sendbuf, False)
    op.check(msg.datatype.dtype, msg.datatype.name)
    return msg.array(), op.reducer(msg.datatype)
