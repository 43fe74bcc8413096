"""Neighborhood collectives: one message to each out-neighbour, one from each in-neighbour.

Every receive is posted first, in the order the caller gives, then every send,
and all are waited for. Messages between two ranks within one call match in
the order they were sent, so a neighbour listed twice (a periodic dimension of
size 1 or 2, a graph with a repeated edge) pairs its i-th message with the i-th
receive posted for it: the caller orders the receives so that this is the
pairing MPI asks for. A negative rank (PROC_NULL) sends and receives nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..transport.requests import RecvOp
from .channel import Channel


def exchange(ch: Channel, sends: Sequence[tuple[int, list[memoryview]]],
             recvs: Sequence[tuple[int, memoryview | None]]) -> list[RecvOp | None]:
    """Post `recvs` (source, buffer or None for a fresh one) in order, then `sends` (dest, parts); wait for all.

    Returns the receive operations in the order of `recvs` (None for PROC_NULL).
    """
    ops: list = []
    received: list[RecvOp | None] = []
    for source, buf in recvs:
        op = ch.irecv(source, buf) if source >= 0 else None
        received.append(op)
        if op is not None:
            ops.append(op)
    for dest, parts in sends:
        if dest >= 0:
            ops.append(ch.isend(dest, *parts))
    ch.waitall(ops)
    return received
