"""``MPI.Intracomm``: collective operations and communicator construction.

Methods here pick an algorithm and hand it a ``Channel``; they never talk to
the transport directly.
"""

from __future__ import annotations

from typing import Any

from ..collectives import barrier_dissemination, bcast_binomial, reduce_binomial
from ..collectives.channel import Channel
from . import serialize
from .comm import Comm
from .op import SUM, Op

# Tags of collective calls cycle through this range; calls are numbered in the
# order every rank makes them, so a tag names one call on one communicator.
_TAG_SPACE = 1 << 29


class Intracomm(Comm):
    def _channel(self) -> Channel:
        self._coll_seq += 1
        return Channel(self._engine, self._group, self._rank, self._coll_ctx, self._coll_seq % _TAG_SPACE)

    # ----------------------------------------------------------- construction
    def Dup(self, info: Any = None) -> "Intracomm":
        self._child_seq += 1
        return type(self)(self._engine, self._group, _child_context(self._ctx, self._child_seq, 0), "")

    Clone = Dup

    def Free(self) -> None:
        pass

    # ------------------------------------------------------------ collectives
    def Barrier(self) -> None:
        barrier_dissemination.barrier(self._channel())

    barrier = Barrier

    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        ch = self._channel()
        parts = serialize.dumps(obj) if self._rank == root else None
        payload = bcast_binomial.bcast(ch, parts, root)
        return obj if self._rank == root else serialize.loads(payload)

    def reduce(self, sendobj: Any, op: Op = SUM, root: int = 0) -> Any:
        return reduce_binomial.reduce_objects(self._channel(), sendobj, op, root)

    def allreduce(self, sendobj: Any, op: Op = SUM) -> Any:
        return self.bcast(self.reduce(sendobj, op, 0), 0)


def _child_context(parent: int, seq: int, color: int) -> int:
    """A context id every member derives alike: from the parent's, the call's number and the color.

    Contexts come in pairs (p2p, collective), so ids are even. 62 bits of a
    hash make a collision between two live communicators vanishingly rare.
    """
    import hashlib

    digest = hashlib.blake2b(f"{parent}:{seq}:{color}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 2) << 1
