"""Rabenseifner's allreduce: reduce-scatter by recursive halving, then allgather by recursive doubling.

Round k of the reduce-scatter pairs rank r with r xor 2^k: each keeps one
half of the range it still owns, sends the other half to its partner and
folds the partner's copy of its own half in. After log2(N) rounds every
rank owns 1/N of the vector, fully reduced; the allgather then replays the
rounds backwards, each rank sending what it owns and receiving its partner's
part straight into the result. Each rank sends and receives 2(N-1)/N of the
vector and reduces (N-1)/N of it, as the ring does, but in 2 log2(N) steps
instead of 2(N-1); against recursive doubling (log2 N whole vectors each
way, and a whole-vector reduction per round) it moves and reduces far less
once N > 2. That is what MPICH runs for large commutative allreduces.

Other N fold in first, as recursive doubling does (``ranks.fold``).

Every element is combined on exactly one rank per round and reaches the
others verbatim through the allgather, so all ranks hold the same bits.
Commutative operations only (a kept half mixes contributions in an order
that is not rank order).

No copy of the input: the first round sends straight from the send buffer
and folds straight into the receive buffer, which holds the kept half from
then on; the half given away is filled by the allgather.
"""

from __future__ import annotations

import numpy as np

from ..util.ranges import split_even
from .channel import Channel, as_bytes
from .options import AllreduceOptions
from .ranks import fold, real_rank


def allreduce(ch: Channel, opts: AllreduceOptions) -> None:
    if opts.start_commutative("Rabenseifner's allreduce", ch.size):
        return
    size, rank = ch.size, ch.rank
    send, recv, combine = opts.send, opts.recv, opts.combine
    pof2, rem, newrank = fold(rank, size)
    tmp = None
    if rank < 2 * rem:
        if rank % 2 == 0:  # hands its vector to rank+1 and gets the result back
            ch.send(rank + 1, as_bytes(send))
            ch.recv(rank + 1, as_bytes(recv))
            return
        if send is recv:
            tmp = np.empty(recv.shape, recv.dtype)
            ch.recv(rank - 1, as_bytes(tmp))
            combine(tmp, recv, recv)
        else:
            ch.recv(rank - 1, as_bytes(recv))
            combine(recv, send, recv)
        send = recv  # (the folded vector is now this rank's contribution)
    blocks = split_even(len(recv), pof2)
    if tmp is None:
        tmp = np.empty(blocks[pof2 // 2][0], recv.dtype)  # the first round's kept half, the largest
    rounds = []
    lo_block, hi_block = 0, pof2
    mask = 1
    while mask < pof2:
        peer = real_rank(newrank ^ mask, rem)
        mid = (lo_block + hi_block) // 2
        if newrank & mask:
            keep, give = (mid, hi_block), (lo_block, mid)
        else:
            keep, give = (lo_block, mid), (mid, hi_block)
        klo, khi = blocks[keep[0]][0], blocks[keep[1] - 1][1]
        glo, ghi = blocks[give[0]][0], blocks[give[1] - 1][1]
        theirs = tmp[: khi - klo]
        ch.sendrecv(peer, [as_bytes(send[glo:ghi])], peer, as_bytes(theirs))
        if peer < rank:
            combine(theirs, send[klo:khi], recv[klo:khi])
        else:
            combine(send[klo:khi], theirs, recv[klo:khi])
        send = recv
        rounds.append((peer, klo, khi, glo, ghi))
        lo_block, hi_block = keep
        mask <<= 1
    for peer, klo, khi, glo, ghi in reversed(rounds):
        ch.sendrecv(peer, [as_bytes(recv[klo:khi])], peer, as_bytes(recv[glo:ghi]))
    if rank < 2 * rem:
        ch.send(rank - 1, as_bytes(recv))
