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


# What one step of a rank's plan does (see ``Plan``).
SEND, RECV_FOLD, EXCHANGE_AS_HIGHER, EXCHANGE_AS_LOWER, RECV_RESULT = range(5)


class Plan:
    """One rank's recursive doubling for one vector, worked out once.

    The steps (fold-in, exchanges, fold-out) depend only on rank and N, so
    an iterative program that reduces the same small vector every iteration
    (``api/repeated_calls.py``) keeps the plan and its scratch vector and
    skips this set-up, a noticeable share of a small allreduce's CPU time.
    """

    __slots__ = ("_send", "_recv", "_combine", "_tmp", "_mine", "_theirs", "_steps")

    def __init__(self, rank: int, size: int, opts: AllreduceOptions) -> None:
        self._send, self._recv, self._combine = opts.send, opts.recv, opts.combine
        steps: list[tuple[int, int]] = []
        if size > 1:
            pof2, rem, newrank = fold(rank, size)
            if rank < 2 * rem:
                steps.append((SEND, rank + 1) if rank % 2 == 0 else (RECV_FOLD, rank - 1))
            if newrank >= 0:
                mask = 1
                while mask < pof2:
                    peer = real_rank(newrank ^ mask, rem)
                    steps.append((EXCHANGE_AS_HIGHER if peer < rank else EXCHANGE_AS_LOWER, peer))
                    mask <<= 1
            if rank < 2 * rem:
                steps.append((SEND, rank - 1) if rank % 2 else (RECV_RESULT, rank + 1))
        self._steps = steps
        recv = opts.recv
        self._mine = as_bytes(recv)
        # (np.empty, not np.empty_like: that goes through numpy's Python-level dispatch)
        self._tmp = np.empty(recv.shape, recv.dtype) if steps else recv
        self._theirs = as_bytes(self._tmp)

    def run(self, ch: Channel) -> None:
        recv, tmp, mine, theirs, combine = self._recv, self._tmp, self._mine, self._theirs, self._combine
        if self._send is not recv:
            recv[...] = self._send  # (slice assignment: np.copyto is a Python-level dispatch too)
        for action, peer in self._steps:
            if action == EXCHANGE_AS_HIGHER:
                ch.sendrecv(peer, [mine], peer, theirs)
                combine(tmp, recv, recv)  # the peer holds the lower ranks' partial
            elif action == EXCHANGE_AS_LOWER:
                ch.sendrecv(peer, [mine], peer, theirs)
                combine(recv, tmp, recv)
            elif action == SEND:
                ch.send(peer, mine)
            elif action == RECV_FOLD:
                ch.recv(peer, theirs)
                combine(tmp, recv, recv)  # the even rank below hands in its vector
            else:  # RECV_RESULT
                ch.recv(peer, mine)


def allreduce(ch: Channel, opts: AllreduceOptions) -> None:
    Plan(ch.rank, ch.size, opts).run(ch)


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
