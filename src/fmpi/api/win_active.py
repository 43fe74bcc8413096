"""Generalized active target synchronization (``Win.Post``/``Start``/``Complete``/``Wait``/``Test``), mixed into ``Win``.

Notices on the window's ``sync`` communicator: a target's Post sends POSTED to each origin of its group, which
Start waits for; an origin's Complete flushes what it sent and sends COMPLETED, which Wait (or Test) takes.
A relay-hosted window (``win_relay``) also moves data between its copies at Post, Wait and Test.
"""

from __future__ import annotations

from typing import Any

from . import exceptions as err
from .group import Group

POSTED, COMPLETED = 1, 2  # tags of the post/start/complete/wait notices on the sync communicator


class ActiveTarget:
    def Post(self, group: Group, assertion: int = 0) -> None:
        w = self._live()
        w.exposure = _ranks(w, group)
        w.completed = set()
        if w.relay is not None:
            w.relay.sync()  # (before the origins may access: the relay's copy holds this rank's stores)
        for rank in w.exposure:
            w.sync.send(None, rank, POSTED)

    def Start(self, group: Group, assertion: int = 0) -> None:
        w = self._live()
        w.access = _ranks(w, group)
        for rank in w.access:
            w.sync.recv(source=rank, tag=POSTED)

    def Complete(self) -> None:
        w = self._live()
        if w.access is None:
            raise err.Exception(err.ERR_RMA_SYNC, "Win.Complete without Win.Start")
        self._flush([rank for rank in w.access if rank in w.touched])
        for rank in w.access:
            w.sync.send(None, rank, COMPLETED)
        w.access = None

    def Wait(self) -> None:
        w = self._live()
        if w.exposure is None:
            raise err.Exception(err.ERR_RMA_SYNC, "Win.Wait without Win.Post")
        for rank in w.exposure:
            if rank not in w.completed:
                w.sync.recv(source=rank, tag=COMPLETED)
        w.exposure = None
        if w.relay is not None:
            w.relay.sync()  # (the origins' updates become visible in this rank's memory)

    def Test(self) -> bool:
        w = self._live()
        if w.exposure is None:
            raise err.Exception(err.ERR_RMA_SYNC, "Win.Test without Win.Post")
        for rank in w.exposure:
            if rank not in w.completed and w.sync.iprobe(source=rank, tag=COMPLETED):
                w.sync.recv(source=rank, tag=COMPLETED)
                w.completed.add(rank)
        if len(w.completed) < len(w.exposure):
            return False
        w.exposure = None
        if w.relay is not None:
            w.relay.sync()
        return True


def _ranks(w: Any, group: Group) -> list[int]:
    """`group`'s processes as ranks of the window's communicator."""
    index = w.sync._index
    return [index[member] for member in group._members]
