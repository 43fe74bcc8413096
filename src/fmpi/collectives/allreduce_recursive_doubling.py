"""Recursive-doubling allreduce: log2(N) exchanges of the whole vector, any N.

In round k rank r swaps its partial result with rank r xor 2^k and folds the
two together, always as ``lower ranks' partial op higher ranks' partial``:
both partners then compute the very same operation on the very same
operands and hold the same bits, round after round, so every rank ends with
an identical result, and non-commutative operations reduce in rank order.
Other N use MPICH's fold-in (see ``ranks.fold``): two extra messages for
the first 2*(N - 2^floor(log2 N)) ranks. The latency-optimal small-message
algorithm; it moves log2(N) whole vectors, so large ones go to the ring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..api import serialize
from .channel import Channel, as_bytes
from .options import AllreduceOptions
from .ranks import fold, real_rank


def allreduce(ch: Channel, opts: AllreduceOptions) -> None:
    size, rank = ch.size, ch.rank
    recv, combine = opts.recv, opts.combine
    # (slice assignment and np.empty, not np.copyto and np.empty_like: those go through
    # numpy's Python-level dispatch, microseconds a call on the small-message path)
    if opts.send is not recv:
        recv[...] = opts.send
    if size == 1:
        return
    pof2, rem, newrank = fold(rank, size)
    mine = as_bytes(recv)
    tmp = np.empty(recv.shape, recv.dtype)
    theirs = as_bytes(tmp)
    if rank < 2 * rem:
        if rank % 2 == 0:
            ch.send(rank + 1, mine)
        else:
            ch.recv(rank - 1, theirs)
            combine(tmp, recv, recv)
    if newrank >= 0:
        mask = 1
        while mask < pof2:
            peer = real_rank(newrank ^ mask, rem)
            ch.sendrecv(peer, [mine], peer, theirs)
            if peer < rank:
                combine(tmp, recv, recv)
            else:
                combine(recv, tmp, recv)
            mask <<= 1
    if rank < 2 * rem:
        if rank % 2:
            ch.send(rank - 1, mine)
        else:
            ch.recv(rank + 1, mine)


def allreduce_objects(ch: Channel, value: Any, fn: Callable[[Any, Any], Any]) -> Any:
    """Python objects: `fn(lower, higher)`; every rank gets the result of the same folds."""
    size, rank = ch.size, ch.rank
    if size == 1:
        return value
    pof2, rem, newrank = fold(rank, size)
    acc = value
    if rank < 2 * rem:
        if rank % 2 == 0:
            ch.send(rank + 1, *serialize.dumps(acc))
        else:
            acc = fn(serialize.loads(ch.recv(rank - 1).payload), acc)
    if newrank >= 0:
        mask = 1
        while mask < pof2:
            peer = real_rank(newrank ^ mask, rem)
            other = serialize.loads(ch.sendrecv(peer, serialize.dumps(acc), peer).payload)
            acc = fn(other, acc) if peer < rank else fn(acc, other)
            mask <<= 1
    if rank < 2 * rem:
        if rank % 2:
            ch.send(rank - 1, *serialize.dumps(acc))
        else:
            acc = serialize.loads(ch.recv(rank + 1).payload)
    return acc
