"""``MPI.Intercomm``: two disjoint groups of processes, each addressing the other.

Point-to-point ranks name processes of the *remote* group (a destination, a
source, a status's source); ``Get_rank``/``Get_size``/``Get_group`` describe the
local one. Both sides hold the same context id, agreed when the
intercommunicator was made (``intercomm_create``), and every id of an
intercommunicator has ``INTER_BIT`` set, which no intracommunicator id has
(``intracomm._child_context`` ids are below 2**63), so the two kinds never
share a context.

Collective calls (``intercomm_buffers``, ``intercomm_objects``) run on a pair
of channels in the collective context: one over the local group, one over
both groups (local ranks first), numbered and tagged as ``collective_calls``
says. Both groups make the same collective calls in the same order (MPI), so
their counters agree.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from ..collectives import allgather_recursive_doubling, bcast_binomial
from ..collectives.channel import Channel
from ..transport.engine import Engine
from ..wire import pickle_oob as serialize
from . import exceptions as err
from . import runtime
from .collective_calls import CollectiveCalls
from .comm import Comm
from .constants import CONGRUENT, IDENT, SIMILAR, UNDEFINED, UNEQUAL
from .group import Group
from .intercomm_buffers import InterBufferCollectives
from .intercomm_objects import InterObjectCollectives
from .intracomm import Intracomm, _child_context

#: Set in every intercommunicator's context id (contexts are u64 on the wire).
INTER_BIT = 1 << 63


@dataclass(slots=True)
class InterChannels:
    """One collective call's channels: ``local`` over the local group; ``cross`` over the local group
    then the remote one, where remote rank j is ``remote(j)``."""

    local: Channel
    cross: Channel

    def remote(self, rank: int) -> int:
        return self.local.size + rank

    @property
    def leader(self) -> bool:
        """This process is the local group's rank 0, which speaks for it to the other group."""
        return self.local.rank == 0

    def swap_leaders(self, obj: Any) -> Any:
        """Every local process gets what the remote group's rank 0 passed (the local rank 0 passes `obj`)."""
        got = None
        if self.leader:
            dest = self.remote(0)
            got = [memoryview(self.cross.sendrecv(dest, serialize.dumps(obj), dest).payload)]
        return serialize.loads(bcast_binomial.bcast_unsized(self.local, got, 0))


class Intercomm(InterObjectCollectives, InterBufferCollectives, CollectiveCalls, Comm):
    """Intercommunicator: communication between two disjoint groups, the local one and the remote one."""
    _inter = True

    def __init__(
        self, engine: Engine | Comm | None = None, group: tuple[int, ...] = (), context: int = 0, name: str = "",
        remote: tuple[int, ...] = (),
    ) -> None:
        if isinstance(engine, Comm):
            return  # a handle on an existing communicator (see Comm.__new__)
        super().__init__(engine, group, context, name)
        self._remote = self._peers = tuple(remote)
        self._remote_index = {w: i for i, w in enumerate(self._remote)}

    # -------------------------------------------------------------- identity
    def Is_inter(self) -> bool:
        """
        Tell whether this is an intercommunicator (True)."""
        self._live()
        return True

    def Is_intra(self) -> bool:
        """
        Tell whether this is an intracommunicator (False)."""
        self._live()
        return False

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)

    def Get_remote_size(self) -> int:
        """
        Return the number of processes in the remote group."""
        self._live()
        return len(self._remote)

    @property
    def remote_size(self) -> int:
        return len(self._remote)

    def Get_group(self) -> Group:
        """
        Return the local group."""
        self._live()
        return Group(self._group, self._me())

    def Get_remote_group(self) -> Group:
        """
        Return the remote group."""
        self._live()
        return Group(self._remote, self._me())

    group = property(Get_group)
    remote_group = property(Get_remote_group)

    def _me(self) -> int:
        return self._engine.rank if self._engine is not None else -1

    def Compare(self, other: Comm) -> int:
        """
        Compare with communicator `other`: IDENT, CONGRUENT, SIMILAR or UNEQUAL."""
        if not isinstance(other, Intercomm):
            return UNEQUAL
        if other._group == self._group and other._remote == self._remote:
            return IDENT if other._ctx == self._ctx else CONGRUENT
        if sorted(other._group) == sorted(self._group) and sorted(other._remote) == sorted(self._remote):
            return SIMILAR
        return UNEQUAL

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other) and (self._engine is None or getattr(other, "_remote", None) == self._remote)

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    # ------------------------------------------- point-to-point: remote ranks
    def _bad_rank(self, rank: int) -> None:
        self._fail(err.ERR_RANK, f"invalid rank {rank} for an intercommunicator whose remote group has {len(self._remote)}")

    def _comm_rank(self, world: int) -> int:
        return self._remote_index.get(world, world)

    # ------------------------------------------------------------ collectives
    def _make_channel(self, tag: int) -> InterChannels:
        engine, ctx = self._engine, self._coll_ctx
        return InterChannels(Channel(engine, self._group, self._rank, ctx, tag),
                             Channel(engine, self._group + self._remote, self._rank, ctx, tag))

    # ----------------------------------------------------------- construction
    def _next_context(self, what: str) -> int:
        """The id of the next communicator derived from this one: the same on both sides (from `what`)."""
        self._child_seq += 1
        return _child_context(self._ctx, self._child_seq, what)

    def _sibling(self, group: tuple[int, ...], remote: tuple[int, ...], context: int) -> Intercomm:
        child = Intercomm(self._engine, group, context | INTER_BIT, "", remote)
        child._errhandler = self._errhandler
        return child

    def Dup(self, info: Any = None) -> Intercomm:
        """
        Return a new intercommunicator with the same groups and copied attributes (collective over both groups)."""
        self._live()
        return self._of_my_class(self._copy_attributes(self._sibling(self._group, self._remote, self._next_context("dup"))))

    Clone = Dup

    def Dup_with_info(self, info: Any) -> Intercomm:
        """
        Duplicate the intercommunicator as Dup does; `info` is accepted and ignored."""
        return self.Dup()

    def Idup(self, info: Any = None) -> tuple[Intercomm, Any]:
        """
        Duplicate the intercommunicator as Dup does; return it with a request that is already complete."""
        from .request import Request

        return self.Dup(), Request.completed()

    Idup_with_info = Idup

    def Merge(self, high: bool = False) -> Intracomm:
        """
        Return one intracommunicator of both groups, ordered by `high`.

        The group that passed high=False comes first (on a tie, the group holding the lower world rank)."""
        self._live()
        remote_high = self._collective(lambda ch: ch.swap_leaders(bool(high)))
        mine_first = (not high and remote_high) or (bool(high) == remote_high and self._group[0] < self._remote[0])
        members = self._group + self._remote if mine_first else self._remote + self._group
        merged = Intracomm(self._engine, members, self._next_context("merge"), "")
        merged._errhandler = self._errhandler
        return merged

    def Split(self, color: int = 0, key: int = 0) -> Intercomm | None:
        """Processes of one color in both groups form an intercommunicator, each side ordered by (key, rank);
        COMM_NULL for UNDEFINED, or when the other group has no process of that color."""
        self._live()

        def run(ch: InterChannels) -> tuple[list, list]:
            mine = serialize.dumps((color, key))
            local = [serialize.loads(v) for v in allgather_recursive_doubling.allgather_objects(ch.local, mine)]
            return local, ch.swap_leaders(local)

        local, remote = self._collective(run)
        context = self._next_context(f"split:{color}")
        chosen = (_members(self._group, local, color), _members(self._remote, remote, color))
        return None if color == UNDEFINED or not all(chosen) else self._sibling(*chosen, context)

    def Split_type(self, split_type: int, key: int = 0, info: Any = None) -> Intercomm | None:
        """
        Split by type: COMM_TYPE_SHARED gives the processes on this host, in both groups; UNDEFINED gives COMM_NULL."""
        if split_type == UNDEFINED:
            return self.Split(UNDEFINED, key)
        return self.Split(zlib.crc32(runtime.node_id().encode()) & 0x7FFFFFFF, key)

    def Create(self, group: Group) -> Intercomm | None:
        """
        Create an intercommunicator of subgroups, one of each local group (collective over both groups).

        Each group passes a subgroup of its local group, whose members get the new intercommunicator."""
        self._live()
        members = group._members
        if not set(members) <= set(self._group):
            self._fail(err.ERR_GROUP, "Intercomm.Create: the group holds processes outside the local group")
        remote = self._collective(lambda ch: ch.swap_leaders(members))
        context = self._next_context(f"create:{min(members, remote)}:{max(members, remote)}")
        return self._sibling(members, remote, context) if self._me() in members and remote else None

    def Create_group(self, group: Group, tag: int = 0) -> Intercomm | None:
        """
        Create an intercommunicator of subgroups as Create does; `tag` is accepted and ignored."""
        return self.Create(group)

    @classmethod
    def Create_from_groups(cls, local_group: Group, local_leader: int = 0, remote_group: Group | None = None,
                           remote_leader: int = 0, stringtag: str = "org.mpi4py", info: Any = None,
                           errhandler: Any = None) -> Intercomm:
        """
        Create an intercommunicator between `local_group` and `remote_group` from the groups alone (MPI 4)."""
        from .intercomm_create import create_from_groups

        return create_from_groups(local_group, local_leader, remote_group, remote_leader, stringtag, errhandler)

    def Free(self) -> None:
        """
        Free the intercommunicator: the handle becomes COMM_NULL."""
        self._free_handle()
        self._remote, self._remote_index = (), {}

    def Disconnect(self) -> None:
        """
        Wait until both groups have called Disconnect (all their traffic delivered), then free the handle.

        The handle becomes COMM_NULL. A parents/children intercommunicator also ends this process's part in the
        spawned job (``spawn.disconnected``)."""
        self._live()
        self.Barrier()
        self.Free()
        from .spawn import disconnected

        disconnected(self)


def _members(group: tuple[int, ...], colors_keys: list[tuple[int, int]], color: int) -> tuple[int, ...]:
    """The processes of `group` that chose `color`, ordered by (key, rank)."""
    chosen = sorted((key, i) for i, (c, key) in enumerate(colors_keys) if c == color)
    return tuple(group[i] for _, i in chosen)


__all__ = ["INTER_BIT", "Intercomm"]
