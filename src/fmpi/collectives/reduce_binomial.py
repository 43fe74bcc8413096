"""Binomial-tree reduction to a root: ceil(log2 N) rounds, any N.

Rank r (counted from the root) receives the partial results of the subtrees
r+1, r+2, r+4, ... in that order and folds each in as ``mine op theirs``, then
sends to r - lowbit(r). Subtrees hold contiguous, higher ranks, so with root 0
the operation is applied in rank order. A non-commutative operation with
another root therefore reduces to rank 0 and forwards the result (as MPICH
and mpi4py do); a commutative one builds the tree around the root itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..wire import pickle_oob as serialize
from .channel import Channel, as_bytes
from .options import ReduceOptions


def _tree(rel: int, size: int) -> tuple[list[int], int]:
    """(children, parent or -1) of relative rank `rel`: children rel+1, rel+2, rel+4, ... below lowbit(rel)."""
    children = []
    mask = 1
    while mask < size and not rel & mask:
        if rel + mask < size:
            children.append(rel + mask)
        mask <<= 1
    return children, (rel - mask if mask < size else -1)


def reduce(ch: Channel, opts: ReduceOptions) -> None:
    size, rank = ch.size, ch.rank
    tree_root = opts.root if opts.commute else 0
    rel = (rank - tree_root) % size
    send = opts.send
    children, parent = _tree(rel, size)
    result = send
    if children:
        # Every child's partial arrives at once into its own scratch; fold them in order.
        temps = [np.empty_like(send) for _ in children]
        recvs = [ch.irecv((c + tree_root) % size, as_bytes(t)) for c, t in zip(children, temps)]
        result = opts.recv if rank == opts.root else np.empty_like(send)
        if result is not send:
            np.copyto(result, send)
        for op, t in zip(recvs, temps):
            ch.wait(op)
            opts.combine(result, t, result)
    if parent >= 0:
        ch.send((parent + tree_root) % size, as_bytes(result))
    if tree_root == opts.root:
        if rank == opts.root and result is not opts.recv:
            np.copyto(opts.recv, result)  # N == 1
        return
    if rank == tree_root:
        ch.send(opts.root, as_bytes(result))
    elif rank == opts.root:
        ch.recv(tree_root, as_bytes(opts.recv))


def reduce_objects(ch: Channel, value: Any, fn: Callable[[Any, Any], Any], root: int) -> Any:
    """`fn(lower, higher)` folds the objects in rank order; the result at root (elsewhere None).

    The same tree as mpi4py's: reduce to rank 0, then hand the result to root.
    """
    size, rank = ch.size, ch.rank
    children, parent = _tree(rank, size)
    recvs = [ch.irecv(c) for c in children]
    acc = value
    for op in recvs:
        ch.wait(op)
        acc = fn(acc, serialize.loads(op.payload))
    if parent >= 0:
        ch.send(parent, *serialize.dumps(acc))
        acc = None
    if root == 0:
        return acc if rank == 0 else None
    if rank == 0:
        ch.send(root, *serialize.dumps(acc))
        return None
    if rank == root:
        return serialize.loads(ch.recv(0).payload)
    return None
