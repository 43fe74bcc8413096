"""Recursive-doubling prefix reduction (Scan, Exscan): log2(N) rounds, any N.

In round k rank r swaps its running total of a block of 2^k ranks with rank
r xor 2^k (when that rank exists). A partner below adds to both the running
total and the result; a partner above only to the running total. Operands
are always combined as ``lower op higher``, so non-commutative operations
are applied in rank order. (The algorithm of MPICH and of mpi4py's object
scan.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..wire import pickle_oob as serialize
from .channel import Channel, as_bytes
from .options import ScanOptions


def scan(ch: Channel, opts: ScanOptions) -> None:
    size, rank = ch.size, ch.rank
    combine, recv = opts.combine, opts.recv
    partial = opts.send.copy()  # the running total of my block of ranks; sent, so never `recv`
    have_result = not opts.exclusive
    if have_result and opts.send is not recv:
        np.copyto(recv, opts.send)
    tmp = np.empty_like(partial)
    mask = 1
    while mask < size:
        peer = rank ^ mask
        if peer < size:
            ch.sendrecv(peer, [as_bytes(partial)], peer, as_bytes(tmp))
            if peer < rank:
                combine(tmp, partial, partial)
                if have_result:
                    combine(tmp, recv, recv)
                else:
                    np.copyto(recv, tmp)
                    have_result = True
            else:
                combine(partial, tmp, partial)
        mask <<= 1


def scan_objects(ch: Channel, value: Any, fn: Callable[[Any, Any], Any], exclusive: bool) -> Any:
    """mpi4py's object scan: `fn(lower, higher)`; exscan gives rank 0 None."""
    size, rank = ch.size, ch.rank
    partial = value
    result = None if exclusive else value
    have_result = not exclusive
    mask = 1
    while mask < size:
        peer = rank ^ mask
        if peer < size:
            other = serialize.loads(ch.sendrecv(peer, serialize.dumps(partial), peer).payload)
            if peer < rank:
                partial = fn(other, partial)
                result = fn(other, result) if have_result else other
                have_result = True
            else:
                partial = fn(partial, other)
        mask <<= 1
    return result
