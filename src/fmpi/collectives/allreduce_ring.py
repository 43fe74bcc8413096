"""Ring allreduce: ring reduce-scatter, then ring allgather, fused into one segmented pipeline.

The bandwidth-optimal algorithm for large vectors: each rank sends and
receives 2(N-1)/N of the vector and reduces (N-1)/N of it, whatever N.
Every block is combined once, by one rank, in a fixed order, and then
copied verbatim to all others, so all ranks hold the same bits.
Commutative operations only (the ring's combination order is not rank order).

Reduce-scatter (see ``reduce_scatter_ring``): block b starts at rank b+1
and picks up each rank's contribution on its way right, ending complete at
rank b. Allgather: each rank sends its complete block right, and every
block is passed on until all ranks have it.

What the fusion buys, with every block cut into ``segment``-byte pieces:

- no input copy: the first step sends straight from the send buffer and
  every fold writes straight into the receive buffer;
- no phase barrier: a segment of this rank's own block goes out to the
  allgather the moment its last fold is done, while later segments are
  still being reduced;
- no unexpected messages: the allgather's receives (straight into their
  final place) are posted right behind the last reduce-scatter receives, so
  a neighbour that finished its reduce-scatter first never lands in the
  transport's unexpected queue (an extra copy of the data). That is safe:
  block b's final value can only reach this rank after this rank's
  contribution to b has been received downstream, so the receive buffer's
  block b is no longer being read or written by then.
"""

from __future__ import annotations

import numpy as np

from ..util.ranges import split_even
from .channel import Channel, as_bytes
from .options import AllreduceOptions


def allreduce(ch: Channel, opts: AllreduceOptions) -> None:
    if opts.start_commutative("the ring allreduce", ch.size):
        return
    size, rank = ch.size, ch.rank
    send, recv, combine = opts.send, opts.recv, opts.combine
    blocks = split_even(len(recv), size)
    right, left = (rank + 1) % size, (rank - 1) % size
    per = max(1, opts.segment // max(1, recv.itemsize))
    last = size - 2  # the last reduce-scatter step, which completes this rank's own block

    def pieces(b: int) -> list[tuple[int, int]]:
        lo, hi = blocks[b]
        return [(s, min(s + per, hi)) for s in range(lo, hi, per)]

    longest = max(hi - lo for lo, hi in blocks)
    scratch = [np.empty(longest, dtype=recv.dtype) for _ in range(min(2, size - 1))]
    gather: list[list] = []

    def post(step: int) -> list:
        """Reduce-scatter step `step` receives block rank-step-2 into scratch[step % 2]."""
        b = (rank - step - 2) % size
        base, tmp = blocks[b][0], scratch[step % 2]
        ops = [(lo, hi, ch.irecv(left, as_bytes(tmp[lo - base : hi - base])), tmp[lo - base : hi - base]) for lo, hi in pieces(b)]
        if step == last:  # the allgather's receives queue up right behind
            for s in range(size - 1):
                gather.append([(lo, hi, ch.irecv(left, as_bytes(recv[lo:hi]))) for lo, hi in pieces((rank - s - 1) % size)])
        return ops

    posted = {0: post(0)}
    if last >= 1:
        posted[1] = post(1)
    sends = [ch.isend(right, as_bytes(send[lo:hi])) for lo, hi in pieces((rank - 1) % size)]
    for step in range(size - 1):
        if 1 <= step < last:
            posted[step + 1] = post(step + 1)  # its scratch held step-1's data, all folded by now
        for lo, hi, op, tmp in posted.pop(step):
            ch.wait(op)
            combine(tmp, send[lo:hi], recv[lo:hi])
            sends.append(ch.isend(right, as_bytes(recv[lo:hi])))  # on to the next fold, or the allgather
    for s in range(size - 1):
        forward = s < size - 2
        for lo, hi, op in gather[s]:
            ch.wait(op)
            if forward:
                sends.append(ch.isend(right, as_bytes(recv[lo:hi])))
    ch.waitall(sends)
