"""Linear gather: every rank sends its block straight to the root.

The root posts one receive per rank, each directly into that rank's place in
the result, so nothing is copied and nothing travels twice. It is the
algorithm for Gatherv (only the root knows the layout) and for large blocks;
its cost is N-1 messages at the root.
"""

from __future__ import annotations

from .channel import Channel
from .options import GatherOptions


def gather(ch: Channel, opts: GatherOptions) -> None:
    size, rank, root = ch.size, ch.rank, opts.root
    if rank != root:
        ch.send(root, opts.send)
        return
    layout, recv = opts.layout, opts.recv
    recvs = [ch.irecv(r, layout.view(recv, r)) for r in range(size) if r != root]
    if opts.send is not None:
        layout.view(recv, root)[:] = opts.send
    ch.waitall(recvs)
