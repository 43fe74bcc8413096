"""Passive target synchronization (``Win.Lock``/``Unlock``/``Lock_all``/``Unlock_all``/``Flush*``/``Sync``),
mixed into ``Win``.

Locks are granted by the target's engine (``rma_target``); ``Lock`` does not wait for the grant, and
``Unlock``/``Flush`` end by flushing the target only when something sent to it is still unanswered. They
need ``Win``'s helpers: ``_live``, ``_target``, ``_ask``, ``_flush``.
"""

from __future__ import annotations

from . import exceptions as err
from .constants import PROC_NULL
from .rma_constants import LOCK_EXCLUSIVE, LOCK_SHARED
from .rma_target import LOCK, NO_ANSWER, UNLOCK


class PassiveTarget:
    def Lock(self, rank: int, lock_type: int = LOCK_EXCLUSIVE, assertion: int = 0) -> None:
        """
        Start an access epoch on `rank`'s window, with an exclusive or shared lock."""
        if rank == PROC_NULL:
            return
        self._target(rank)
        if lock_type not in (LOCK_EXCLUSIVE, LOCK_SHARED):
            raise err.Exception(err.ERR_LOCKTYPE, f"invalid lock type {lock_type}")
        w = self._w
        if rank in w.locked:
            raise err.Exception(err.ERR_RMA_SYNC, f"Win.Lock: this rank already holds a lock on rank {rank}")
        if w.relay is not None:
            w.relay.lock(rank, lock_type == LOCK_EXCLUSIVE)
        elif rank == w.me:
            self._ask(rank, LOCK, (lock_type,))  # (this rank's operations on its own window apply at once: wait)
        else:
            # Lazy, as MPI allows and MPICH does: the request goes out and Lock returns; the target holds
            # this rank's later requests until it grants the lock. Lock, Put, Unlock is then one round trip.
            w.requests.send((lock_type, NO_ANSWER), rank, w.fence.tag(LOCK, rank))
            w.touched.add(rank)  # (a Flush waits for the grant, even with no operation since)
        w.locked.add(rank)

    def Unlock(self, rank: int) -> None:
        """
        End the access epoch on `rank`'s window: the operations on it are complete there."""
        if rank == PROC_NULL:
            return
        self._target(rank)
        w = self._w
        if rank not in w.locked:
            raise err.Exception(err.ERR_RMA_SYNC, f"Win.Unlock: this rank holds no lock on rank {rank}")
        w.locked.discard(rank)
        self._flush([rank], UNLOCK)

    def Lock_all(self, assertion: int = 0) -> None:
        """
        Start an access epoch on every rank's window, with shared locks."""
        for rank in range(len(self._live().sizes)):
            self.Lock(rank, LOCK_SHARED)

    def Unlock_all(self) -> None:
        """
        End the access epochs Lock_all started: the operations on every rank are complete there."""
        w = self._live()
        ranks = range(len(w.sizes))
        if not w.locked.issuperset(ranks):
            raise err.Exception(err.ERR_RMA_SYNC, "Win.Unlock_all: this rank holds no lock on some rank (Lock_all first)")
        w.locked.clear()
        self._flush(ranks, UNLOCK)

    def Flush(self, rank: int) -> None:
        """
        Complete the operations on `rank`'s window: a round trip only if something sent to it is unanswered."""
        if rank != PROC_NULL:
            self._target(rank)
            if rank in self._w.touched or self._w.relay is not None:
                self._flush([rank])

    def Flush_all(self) -> None:
        """
        Complete the operations on every rank's window."""
        self._flush(sorted(self._live().touched))

    def Flush_local(self, rank: int) -> None:
        """
        Complete the operations to `rank` locally: at once, as an origin buffer is free when its call returns."""
        self._live()

    def Flush_local_all(self) -> None:
        """
        Complete the operations locally: nothing to wait for, as an origin buffer is free when its call returns."""
        self._live()

    def Sync(self) -> None:
        """
        Synchronize the public and private copies: one memory (``WIN_UNIFIED``), so nothing to do locally."""
        w = self._live()
        if w.relay is not None:
            w.relay.sync()
