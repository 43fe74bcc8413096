"""Binomial-tree reduction of Python objects to a root: ceil(log2 N) rounds, any N."""

from __future__ import annotations

from typing import Any, Callable

from ..api import serialize
from .channel import Channel


def reduce_objects(ch: Channel, value: Any, combine: Callable[[Any, Any], Any], root: int) -> Any:
    """`combine(lower, higher)` folds in rank order when root is 0; result only at root (else None)."""
    size, rel = ch.size, (ch.rank - root) % ch.size
    mask = 1
    acc = value
    while mask < size:
        if rel & mask == 0:
            src = rel | mask
            if src < size:
                other = serialize.loads(ch.recv((src + root) % size).payload)
                acc = combine(acc, other)
        else:
            ch.send(((rel & ~mask) + root) % size, *serialize.dumps(acc))
            return None
        mask <<= 1
    return acc
