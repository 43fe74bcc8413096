"""Dissemination barrier: ceil(log2 N) rounds, any N (Hensgen, Finkel & Manber).

In round k every rank signals rank+2^k and waits for rank-2^k; after the last
round each rank has transitively heard from all others.
"""

from __future__ import annotations

from .channel import Channel

_EMPTY = memoryview(b"")


def barrier(ch: Channel) -> None:
    step = 1
    while step < ch.size:
        recv = ch.irecv((ch.rank - step) % ch.size)
        send = ch.isend((ch.rank + step) % ch.size, _EMPTY)
        ch.waitall([send, recv])
        step <<= 1
