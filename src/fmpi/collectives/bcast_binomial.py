"""Binomial-tree broadcast: ceil(log2 N) rounds, any N, any root.

Relative rank r (= rank - root mod N) receives from r - lowbit(r) and
forwards to r + lowbit(r)/2, r + lowbit(r)/4, ... A buffer of known length
travels in segments: each segment is forwarded as soon as it has arrived, so
a deep tree pipelines a large message instead of storing it whole at every
level. Received segments land straight in the caller's buffer.
"""

from __future__ import annotations

from .channel import Channel
from .options import BcastOptions, segments


def _parent_and_children(rel: int, size: int) -> tuple[int, list[int]]:
    """(parent or -1, children) of relative rank `rel`, children nearest first."""
    parent = -1
    mask = 1
    while mask < size:
        if rel & mask:
            parent = rel - mask
            break
        mask <<= 1
    children = []
    mask >>= 1
    while mask > 0:
        if rel + mask < size:
            children.append(rel + mask)
        mask >>= 1
    return parent, children


def bcast(ch: Channel, opts: BcastOptions) -> None:
    size, root = ch.size, opts.root
    if size == 1:
        return
    rel = (ch.rank - root) % size
    parent, children = _parent_and_children(rel, size)
    real = [(c + root) % size for c in children]
    buf = opts.buf
    pieces = segments(len(buf), opts.segment)
    sends = []
    if parent < 0:
        for lo, hi in pieces:
            sends.extend(ch.isend(c, buf[lo:hi]) for c in real)
    else:
        src = (parent + root) % size
        recvs = [ch.irecv(src, buf[lo:hi]) for lo, hi in pieces]
        for (lo, hi), op in zip(pieces, recvs):
            ch.wait(op)
            sends.extend(ch.isend(c, buf[lo:hi]) for c in real)
    ch.waitall(sends)


def bcast_unsized(ch: Channel, parts: list[memoryview] | None, root: int) -> memoryview:
    """Broadcast a payload whose length only the root knows; every rank gets it as one view."""
    size = ch.size
    if size == 1:
        return parts[0] if len(parts) == 1 else memoryview(b"".join(parts))
    rel = (ch.rank - root) % size
    parent, children = _parent_and_children(rel, size)
    payload: memoryview | None = None
    if parent >= 0:
        payload = memoryview(ch.recv((parent + root) % size).payload)
        parts = [payload]
    ch.waitall([ch.isend((c + root) % size, *parts) for c in children])
    if payload is None:
        payload = parts[0] if len(parts) == 1 else memoryview(b"".join(parts))
    return payload
