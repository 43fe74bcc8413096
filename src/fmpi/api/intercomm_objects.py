"""Lowercase collectives of intercommunicators: any picklable object, from one group to the other.

The roots and results follow mpi4py: in a rooted call the root passes
``MPI.ROOT`` (and gets the result of gather/reduce), the rest of its group
``MPI.PROC_NULL`` (and get None), the other group the root's remote rank;
``allgather``/``alltoall`` return one item per remote process; ``allreduce``
returns the reduction of the other group's objects. As in mpi4py, a reduction
is first folded within the group to its rank 0, which sends it across.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..collectives import bcast_binomial, reduce_binomial
from ..wire import pickle_oob as serialize
from .collective_objects import _items
from .constants import PROC_NULL, ROOT
from .op import SUM, Op, as_object_fn


def _fold_to_leader(ch: Any, obj: Any, op: Op | Any) -> Any:
    """The local group's objects reduced with `op`, at local rank 0 (None elsewhere)."""
    if ch.local.size == 1:
        return obj
    return reduce_binomial.reduce_objects(ch.local, obj, as_object_fn(op), 0)


class InterObjectCollectives:
    """Mixed into ``Intercomm``; needs ``_collective``, ``_role`` and ``remote_size``."""

    def barrier(self) -> None:
        self.Barrier()

    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        root = self._role(root)
        if root == PROC_NULL:
            return self._collective(lambda ch: None)
        if root == ROOT:
            parts = serialize.dumps(obj)
            return self._collective(lambda ch: ch.cross.send(ch.remote(0), *parts))

        def run(ch: Any) -> Any:
            got = [memoryview(ch.cross.recv(ch.remote(root)).payload)] if ch.leader else None
            return serialize.loads(bcast_binomial.bcast_unsized(ch.local, got, 0))

        return self._collective(run)

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        root = self._role(root)
        if root == PROC_NULL:
            return self._collective(lambda ch: None)
        if root == ROOT:
            return self._collective(lambda ch: self._from_each(ch))
        parts = serialize.dumps(sendobj)
        return self._collective(lambda ch: ch.cross.send(ch.remote(root), *parts))

    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0) -> Any:
        root = self._role(root)
        if root == PROC_NULL:
            return self._collective(lambda ch: None)
        if root == ROOT:
            blobs = [serialize.dumps(x) for x in _items(sendobj, self.remote_size)]
            return self._collective(lambda ch: ch.cross.waitall(self._to_each(ch, blobs)))
        return self._collective(lambda ch: serialize.loads(ch.cross.recv(ch.remote(root)).payload))

    def allgather(self, sendobj: Any) -> list[Any]:
        parts = serialize.dumps(sendobj)
        return self._collective(lambda ch: self._swap_each(ch, [parts] * self.remote_size))

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        blobs = [serialize.dumps(x) for x in _items(sendobj, self.remote_size)]
        return self._collective(lambda ch: self._swap_each(ch, blobs))

    def reduce(self, sendobj: Any, op: Op | Any = SUM, root: int = 0) -> Any:
        root = self._role(root)
        if root == PROC_NULL:
            return self._collective(lambda ch: None)
        if root == ROOT:
            return self._collective(lambda ch: serialize.loads(ch.cross.recv(ch.remote(0)).payload))

        def run(ch: Any) -> None:
            folded = _fold_to_leader(ch, sendobj, op)
            if ch.leader:
                ch.cross.send(ch.remote(root), *serialize.dumps(folded))

        return self._collective(run)

    def allreduce(self, sendobj: Any, op: Op | Any = SUM) -> Any:
        return self._collective(lambda ch: ch.swap_leaders(_fold_to_leader(ch, sendobj, op)))

    # --------------------------------------------------------------- helpers
    @staticmethod
    def _to_each(ch: Any, blobs: list[list[memoryview]]) -> list[Any]:
        """Start sending blobs[i] to remote process i, for every i; the sends' ops."""
        return [ch.cross.isend(ch.remote(i), *parts) for i, parts in enumerate(blobs)]

    def _swap_each(self, ch: Any, blobs: list[list[memoryview]]) -> list[Any]:
        """Send blobs[i] to remote process i and receive an object from each, in rank order."""
        sends = self._to_each(ch, blobs)
        got = self._from_each(ch)
        ch.cross.waitall(sends)
        return got

    def _from_each(self, ch: Any) -> list[Any]:
        """One object from every remote process, in rank order."""
        ops = [ch.cross.irecv(ch.remote(i)) for i in range(self.remote_size)]
        ch.cross.waitall(ops)
        return [serialize.loads(op.payload) for op in ops]
