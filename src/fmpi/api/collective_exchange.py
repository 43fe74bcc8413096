"""Uppercase alltoall family of intracommunicators: the plan of ``Alltoall``, ``Alltoallv`` and
``Alltoallw``, and ``Alltoallw``'s own entry points (the other two's are ``collective_entries``';
mixed into ``Intracomm`` through ``BufferCollectives``), and ``finishing``, which every plan
uses to unpack what arrived into a staging buffer.

``Alltoallw`` takes one datatype per rank and displacements in bytes (mpi4py-fft's
pencil transposes: a subarray type per rank on both sides). Every rank's block is
packed into one staging buffer in rank order (or, when all the datatypes are
contiguous, read in place), the same pairwise exchange as ``Alltoallv`` moves it,
and the received blocks are unpacked into place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..collectives import table
from ..collectives.channel import Channel
from ..collectives.options import AlltoallOptions, Layout
from . import collspecs as specs
from .constants import IN_PLACE
from .request import Request

Plan = Callable[[Channel], None]


def finishing(run: Plan, *received: specs.Simple | specs.Vector | None) -> Plan:
    """`run`, then the bytes received into staging buffers to their places (datatypes with gaps only)."""
    pending = [spec for spec in received if spec is not None and spec.stages_receive]
    if not pending:
        return run

    def run_then_unpack(ch: Channel) -> None:
        run(ch)
        for spec in pending:
            spec.finish()

    return run_then_unpack


class ExchangeCollectives:
    """Needs ``_blocking``, ``_nonblocking`` and ``size`` (see ``BufferCollectives``)."""

    def Alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        """
        Exchange parts of the buffers between all members, with counts, byte displacements and datatypes per member."""
        self._blocking(self._plan_alltoall(sendbuf, recvbuf, "w"))

    def Ialltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        """
        Start an Alltoallw and return its Request."""
        return self._nonblocking(self._plan_alltoall(sendbuf, recvbuf, "w"))

    def _plan_alltoall(self, sendbuf: Any, recvbuf: Any, kind: str) -> Plan:
        size = self.size
        recv_spec, recv, rlayout = blocks_of(recvbuf, True, size, kind)
        # Alltoallw: only MPI.IN_PLACE means in place (None is an empty message there, as in mpi4py).
        in_place = sendbuf is IN_PLACE if kind == "w" else specs.in_place(sendbuf)
        if in_place:
            send, slayout = None, rlayout  # a copy of the receive buffer, taken when the call runs
        else:
            _, send, slayout = blocks_of(sendbuf, False, size, kind)
        window = table.alltoall_window(max(max(rlayout.lengths, default=0), max(slayout.lengths, default=0)), size)

        def run(ch: Channel) -> None:
            source = memoryview(bytearray(recv)) if in_place else send
            opts = AlltoallOptions(source, slayout, recv, rlayout, window)
            table.run("alltoall", ch, opts, sum(rlayout.lengths))

        return finishing(run, recv_spec)


def blocks_of(spec: Any, writable: bool, size: int, kind: str) -> tuple[Any, memoryview, Layout]:
    """(the parsed spec, the bytes to send from or receive into, each rank's place in them)."""
    if kind == "even":
        even = specs.simple(spec, writable, size)
        return even, even.data(size), Layout.even(size, even.nbytes)
    vector = specs.vector(spec, writable, size) if kind == "v" else specs.wvector(spec, writable, size)
    return vector, vector.view, vector.layout
