"""Binomial-tree scatter: ceil(log2 N) rounds, any N, any root.

Relative rank r (rank - root mod N) receives the blocks of its whole subtree
(relative ranks r .. r+lowbit(r)-1) from its parent in one message, keeps
its own and passes each child the child's subtree. Fewer messages at the
root than a linear scatter, so it wins for small blocks; every block but the
leaves' travels more than once, so large scatters go linear instead.
"""

from __future__ import annotations

from .blobs import Blob, pack, unpack
from .channel import Channel
from .options import ScatterOptions
from .ranks import subtree


def _parent_and_children(rel: int, size: int) -> tuple[int, list[int]]:
    parent = rel - (rel & -rel) if rel else -1
    span = subtree(rel, size)
    children = []
    mask = 1
    while mask < span:
        children.append(rel + mask)
        mask <<= 1
    return parent, children[::-1]  # farthest (largest subtree) first, as the parent sends


def scatter(ch: Channel, opts: ScatterOptions) -> None:
    if opts.block < 0:
        raise ValueError("binomial scatter needs equal blocks")
    size, root, block = ch.size, opts.root, opts.block
    rel = (ch.rank - root) % size
    parent, children = _parent_and_children(rel, size)
    span = subtree(rel, size)
    if parent < 0:
        # The root's blocks in relative order: rank root, root+1, ..., root-1.
        send = opts.send
        if root:
            cut = root * block
            mine = memoryview(bytearray(size * block))
            mine[: size * block - cut] = send[cut : size * block]
            mine[size * block - cut :] = send[:cut]
        else:
            mine = send
    elif span == 1:
        ch.recv((parent + root) % size, opts.recv)
        return
    else:
        mine = memoryview(bytearray(span * block))
        ch.recv((parent + root) % size, mine)
    sends = [
        ch.isend((c + root) % size, mine[(c - rel) * block : (c - rel + subtree(c, size)) * block]) for c in children
    ]
    if opts.recv is not None:
        opts.recv[:block] = mine[:block]
    ch.waitall(sends)


def scatter_objects(ch: Channel, blobs: list[Blob] | None, root: int) -> memoryview:
    """Root passes one blob per rank; every rank gets its own back as one view."""
    size = ch.size
    rel = (ch.rank - root) % size
    parent, children = _parent_and_children(rel, size)
    if parent < 0:
        mine = [blobs[(j + root) % size] for j in range(size)]
    else:
        mine = unpack(ch.recv((parent + root) % size).payload)
        mine = [[b] for b in mine]
    sends = [ch.isend((c + root) % size, *pack(mine[c - rel : c - rel + subtree(c, size)])) for c in children]
    own = mine[0]
    ch.waitall(sends)
    return own[0] if len(own) == 1 else memoryview(b"".join(own))
