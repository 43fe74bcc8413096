"""Lowercase collectives: any picklable Python object, as mpi4py's.

Objects are pickled once each (large buffers inside them out of band, see
``serialize``) and moved by the object variants of the tree and
recursive-doubling algorithms, which carry each rank's pickle as a separate
blob. Results follow mpi4py: every rank, the root included, gets a fresh
unpickled copy (``bcast`` at the root does not return the object passed in;
a reduction on one rank returns a copy); ``gather``/``reduce`` return None
off the root; ``exscan`` gives rank 0 None; ``scatter``/``alltoall`` want
exactly one item per rank. ``op`` may be an ``MPI.Op`` or any two-argument
callable, applied as ``op(lower ranks' value, higher ranks' value)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..collectives import (
    allgather_recursive_doubling,
    allreduce_recursive_doubling,
    alltoall_pairwise,
    bcast_binomial,
    gather_binomial,
    reduce_binomial,
    scan_recursive_doubling,
    scatter_binomial,
)
from ..wire import pickle_oob as serialize
from .mpi4py_internals import _comm_lock
from .op import SUM, Op, as_object_fn


T = TypeVar("T")


def _locked(fn: Callable[..., T]) -> Callable[..., T]:
    """Hold the communicator's lock named after the call while it runs, as mpi4py does for the
    object collectives it may build from several messages (threads calling them do not interleave)."""

    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> T:
        with _comm_lock(self, fn.__name__):
            return fn(self, *args, **kwargs)

    return call


def _copy(obj: Any) -> Any:
    parts = serialize.dumps(obj)
    return serialize.loads(b"".join(parts))


def _items(sendobj: Any, size: int) -> Sequence[Any]:
    if sendobj is None:  # as mpi4py: None stands for a None for every rank
        return [None] * size
    items = list(sendobj)
    if len(items) != size:
        raise ValueError(f"expecting {size} items, got {len(items)}")
    return items


class ObjectCollectives:
    """Mixed into ``Intracomm``; needs ``_collective``, ``_root``, ``rank``, ``size``."""

    def barrier(self) -> None:
        """
        Wait until every member has called barrier (Barrier, under mpi4py's lowercase name)."""
        self.Barrier()

    @_locked
    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """
        Broadcast a Python object from `root` and return it on every member."""
        root = self._root(root)
        parts = serialize.dumps(obj) if self.rank == root else None
        payload = self._collective(lambda ch: bcast_binomial.bcast_unsized(ch, parts, root))
        return serialize.loads(payload)

    def reduce(self, sendobj: Any, op: Op | Any = SUM, root: int = 0) -> Any:
        """
        Combine the members' objects with `op` and return the result at `root` (None elsewhere)."""
        root = self._root(root)
        fn = as_object_fn(op)
        if self.size == 1:
            return _copy(sendobj)
        return self._collective(lambda ch: reduce_binomial.reduce_objects(ch, sendobj, fn, root))

    def allreduce(self, sendobj: Any, op: Op | Any = SUM) -> Any:
        """
        Combine the members' objects with `op` and return the result on every member."""
        fn = as_object_fn(op)
        if self.size == 1:
            return _copy(sendobj)
        return self._collective(lambda ch: allreduce_recursive_doubling.allreduce_objects(ch, sendobj, fn))

    def scan(self, sendobj: Any, op: Op | Any = SUM) -> Any:
        """
        Return the `op` reduction of the objects of the members up to this one's rank (inclusive)."""
        fn = as_object_fn(op)
        if self.size == 1:
            return _copy(sendobj)
        return self._collective(lambda ch: scan_recursive_doubling.scan_objects(ch, sendobj, fn, False))

    def exscan(self, sendobj: Any, op: Op | Any = SUM) -> Any:
        """
        Return the `op` reduction of the objects of the members below this one's rank (None at rank 0)."""
        fn = as_object_fn(op)
        if self.size == 1:
            return None
        return self._collective(lambda ch: scan_recursive_doubling.scan_objects(ch, sendobj, fn, True))

    @_locked
    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """
        Return the list of every member's object at `root`, in rank order (None elsewhere)."""
        root = self._root(root)
        blob = serialize.dumps(sendobj)
        views = self._collective(lambda ch: gather_binomial.gather_objects(ch, blob, root))
        return None if views is None else [serialize.loads(v) for v in views]

    @_locked
    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0) -> Any:
        """
        Send the i-th item of `sendobj` at `root` to member i and return this member's item."""
        root = self._root(root)
        blobs = [serialize.dumps(x) for x in _items(sendobj, self.size)] if self.rank == root else None
        return serialize.loads(self._collective(lambda ch: scatter_binomial.scatter_objects(ch, blobs, root)))

    @_locked
    def allgather(self, sendobj: Any) -> list[Any]:
        """
        Return the list of every member's object on every member, in rank order."""
        blob = serialize.dumps(sendobj)
        views = self._collective(lambda ch: allgather_recursive_doubling.allgather_objects(ch, blob))
        return [serialize.loads(v) for v in views]

    @_locked
    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """
        Send the i-th item of `sendobj` to member i and return the list of the items received, in rank order."""
        blobs = [serialize.dumps(x) for x in _items(sendobj, self.size)]
        views = self._collective(lambda ch: alltoall_pairwise.alltoall_objects(ch, blobs))
        return [serialize.loads(v) for v in views]
