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

from ..wire import pickle_oob as serialize
from .channel import Channel, as_bytes
from .options import AllreduceOptions
from .ranks import fold, real_rank

# What one step of a rank's plan does (see ``Plan``).
SEND, RECV_COMBINE, EXCHANGE, RECV_RESULT = range(4)


class Plan:
    """One rank's recursive doubling for one vector, worked out once.

    The steps (fold-in, exchanges, fold-out) depend only on rank and N, so
    an iterative program that reduces the same small vector every iteration
    (``api/repeated_calls.py``) keeps the plan and its scratch vector and
    skips this set-up, a noticeable share of a small allreduce's CPU time.

    Each step has its operands bound: what it sends, and the (lower,
    higher) pair it combines into the receive vector. The first step reads
    the send vector itself, so a call that is not in place never copies it
    into the receive vector first (for a small vector that copy cost as
    much as the combine).
    """

    __slots__ = ("_send", "_recv", "_combine", "_mine", "_theirs", "_steps", "_copy")

    def __init__(self, rank: int, size: int, opts: AllreduceOptions) -> None:
        send, recv = opts.send, opts.recv
        self._send, self._recv, self._combine = send, recv, opts.combine
        self._mine = as_bytes(recv)
        # (np.empty, not np.empty_like: that goes through numpy's Python-level dispatch)
        tmp = np.empty(recv.shape, recv.dtype) if size > 1 else recv
        self._theirs = as_bytes(tmp)
        partial = send  # this rank's partial result so far (the send vector until a step writes recv)
        # (action, peer, the message's parts made once, and the (lower, higher) operands of the combine)
        steps: list[tuple[int, int, list[memoryview] | None, np.ndarray | None, np.ndarray | None]] = []
        if size > 1:
            pof2, rem, newrank = fold(rank, size)
            if rank < 2 * rem:
                if rank % 2 == 0:
                    steps.append((SEND, rank + 1, [as_bytes(partial)], None, None))
                else:  # the even rank below hands in its vector
                    steps.append((RECV_COMBINE, rank - 1, None, tmp, partial))
                    partial = recv
            if newrank >= 0:
                mask = 1
                while mask < pof2:
                    peer = real_rank(newrank ^ mask, rem)
                    # lower ranks' partial first: both partners compute the same operation on the same operands
                    lower, higher = (tmp, partial) if peer < rank else (partial, tmp)
                    steps.append((EXCHANGE, peer, [as_bytes(partial)], lower, higher))
                    partial = recv
                    mask <<= 1
            if rank < 2 * rem:
                if rank % 2:
                    steps.append((SEND, rank - 1, [as_bytes(partial)], None, None))
                else:
                    steps.append((RECV_RESULT, rank + 1, None, None, None))
                    partial = recv
        self._steps = steps
        # Only a world of one (or a rank whose steps never write recv) still needs the copy.
        self._copy = partial is not recv

    def run(self, ch: Channel) -> None:
        recv, theirs, combine = self._recv, self._theirs, self._combine
        if self._copy:
            recv[...] = self._send  # (slice assignment: np.copyto is a Python-level dispatch too)
        for action, peer, out, lower, higher in self._steps:
            if action == EXCHANGE:
                ch.sendrecv(peer, out, peer, theirs)
                combine(lower, higher, recv)
            elif action == SEND:
                ch.send(peer, *out)
            elif action == RECV_COMBINE:
                ch.recv(peer, theirs)
                combine(lower, higher, recv)
            else:  # RECV_RESULT
                ch.recv(peer, self._mine)


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
