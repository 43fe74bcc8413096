"""Dissemination barrier: ceil(log2 N) rounds, any N (Hensgen, Finkel & Manber).

In round k every rank signals rank+2^k and waits for rank-2^k; after the last
round each rank has transitively heard from all others. When N is a power of
two, round k pairs rank r with r xor 2^k instead (the same rounds: after
round k each rank has heard from its whole aligned block of 2^(k+1) ranks),
so each round is one exchange with one peer, the transport's cheapest step
(``Channel.sendrecv``).
"""

from __future__ import annotations

from .channel import Channel

_EMPTY = memoryview(b"")
_NOTHING = memoryview(bytearray())  # (where the empty signals are received: no buffer to allocate)


def barrier(ch: Channel) -> None:
    size, rank = ch.size, ch.rank
    pairwise = size & (size - 1) == 0
    step = 1
    while step < size:
        if pairwise:
            peer = rank ^ step
            ch.sendrecv(peer, [_EMPTY], peer, _NOTHING)
        else:
            ch.sendrecv((rank + step) % size, [_EMPTY], (rank - step) % size, _NOTHING)
        step <<= 1
