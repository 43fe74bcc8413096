"""Binomial-tree gather: ceil(log2 N) rounds, any N, any root.

The mirror image of the binomial scatter: relative rank r collects the blocks
of its subtree (relative ranks r .. r+lowbit(r)-1) from its children, then
sends them to its parent in one message. With root 0 the root receives
straight into the result; with another root the blocks arrive in relative
order and are rotated once at the end.
"""

from __future__ import annotations

from .blobs import Blob, pack, unpack
from .channel import Channel
from .options import GatherOptions
from .ranks import subtree


def _children(rel: int, size: int) -> list[int]:
    span = subtree(rel, size)
    out, mask = [], 1
    while mask < span:
        out.append(rel + mask)
        mask <<= 1
    return out


def gather(ch: Channel, opts: GatherOptions) -> None:
    if opts.block < 0:
        raise ValueError("binomial gather needs equal blocks")
    size, root, block = ch.size, opts.root, opts.block
    rel = (ch.rank - root) % size
    span = subtree(rel, size)
    children = _children(rel, size)
    if rel == 0 and root == 0:
        mine = opts.recv  # relative order is rank order: receive in place
    elif span == 1:
        ch.send(((rel - (rel & -rel)) + root) % size, opts.send)
        return
    else:
        mine = memoryview(bytearray(span * block))
    if opts.send is not None:
        mine[:block] = opts.send
    elif rel == 0 and root != 0:
        mine[:block] = opts.layout.view(opts.recv, root)  # the root's block, in place
    recvs = [
        ch.irecv((c + root) % size, mine[(c - rel) * block : (c - rel + subtree(c, size)) * block]) for c in children
    ]
    ch.waitall(recvs)
    if rel:
        ch.send(((rel - (rel & -rel)) + root) % size, mine)
    elif root:
        cut = root * block
        recv = opts.recv
        recv[cut : size * block] = mine[: size * block - cut]
        recv[:cut] = mine[size * block - cut :]


def gather_objects(ch: Channel, blob: Blob, root: int) -> list[memoryview] | None:
    """Every rank passes its blob; the root gets all of them in rank order (others None)."""
    size = ch.size
    rel = (ch.rank - root) % size
    mine: list[Blob] = [blob]
    recvs = [ch.irecv((c + root) % size) for c in _children(rel, size)]
    ch.waitall(recvs)
    for op in recvs:
        mine.extend([b] for b in unpack(op.payload))
    if rel:
        ch.send(((rel - (rel & -rel)) + root) % size, *pack(mine))
        return None
    flat = [b[0] if len(b) == 1 else memoryview(b"".join(b)) for b in mine]
    return [flat[(r - root) % size] for r in range(size)]
