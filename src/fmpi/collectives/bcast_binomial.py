"""Binomial-tree broadcast of a byte payload: ceil(log2 N) rounds, any N, any root."""

from __future__ import annotations

from .channel import Channel


def bcast(ch: Channel, parts: list[memoryview] | None, root: int) -> memoryview:
    """Root passes its payload parts; every rank gets the payload back as one view."""
    size, rel = ch.size, (ch.rank - root) % ch.size
    mask = 1
    payload: memoryview | None = None
    while mask < size:
        if rel & mask:
            payload = memoryview(ch.recv((rel - mask + root) % size).payload)
            parts = [payload]
            break
        mask <<= 1
    mask >>= 1
    sends = []
    while mask > 0:
        if rel + mask < size:
            sends.append(ch.isend((rel + mask + root) % size, *parts))
        mask >>= 1
    ch.waitall(sends)
    if payload is None:
        payload = parts[0] if len(parts) == 1 else memoryview(b"".join(parts))
    return payload
