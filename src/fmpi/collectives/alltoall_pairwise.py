"""Pairwise-exchange alltoall: in step s rank r sends to r+s and receives from r-s.

N-1 steps, every rank busy in every step, each block sent once straight from
the send buffer into its place in the receive buffer. ``window`` steps are in
flight at once: all of them for small blocks (one round of latency), a few
for large ones (bounded memory in the kernel and on the links). Works for
Alltoall and Alltoallv, any N.
"""

from __future__ import annotations

from .blobs import Blob
from .channel import Channel
from .options import AlltoallOptions


def alltoall(ch: Channel, opts: AlltoallOptions) -> None:
    size, rank = ch.size, ch.rank
    send, recv, sl, rl = opts.send, opts.recv, opts.send_layout, opts.recv_layout
    rl.view(recv, rank)[:] = sl.view(send, rank)
    window = max(1, opts.window)
    if window == 1:  # one step at a time: each is an exchange (the transport's fast path when dst == src)
        for s in range(1, size):
            dst, src = (rank + s) % size, (rank - s) % size
            ch.sendrecv(dst, [sl.view(send, dst)], src, rl.view(recv, src))
        return
    pending: list = []
    for s in range(1, size):
        dst, src = (rank + s) % size, (rank - s) % size
        pending.append(ch.irecv(src, rl.view(recv, src)))
        pending.append(ch.isend(dst, sl.view(send, dst)))
        if s % window == 0:
            ch.waitall(pending)
            pending = []
    ch.waitall(pending)


def alltoall_objects(ch: Channel, blobs: list[Blob]) -> list[memoryview]:
    """Rank r passes one blob per destination; gets one view per source back."""
    size, rank = ch.size, ch.rank
    out: list = [None] * size
    own = blobs[rank]
    out[rank] = own[0] if len(own) == 1 else memoryview(b"".join(own))
    recvs = {}
    sends = []
    for s in range(1, size):
        dst, src = (rank + s) % size, (rank - s) % size
        recvs[src] = ch.irecv(src)
        sends.append(ch.isend(dst, *blobs[dst]))
    ch.waitall(sends + list(recvs.values()))
    for src, op in recvs.items():
        out[src] = memoryview(op.payload)
    return out
