"""``MPI.Group``: an ordered set of processes, named by their rank in COMM_WORLD.

Groups are local objects (no communication): they only describe who would
be in a communicator that ``Comm.Create`` / ``Create_group`` builds from them.
Signatures follow mpi4py 4.x: ``Union``, ``Intersection`` and ``Difference``
are class methods taking two groups; ``Translate_ranks(ranks, group)``
defaults to all ranks and to COMM_WORLD's group.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import exceptions as err
from .constants import CONGRUENT, IDENT, SIMILAR, UNDEFINED, UNEQUAL


class Group:
    __slots__ = ("_index", "_me", "_members")

    def __init__(self, members: Sequence[int] = (), me: int = -1) -> None:
        self._members = tuple(members)
        self._me = me  # this process's world rank
        self._index = {w: i for i, w in enumerate(self._members)}

    # -------------------------------------------------------------- accessors
    def Get_size(self) -> int:
        return len(self._members)

    def Get_rank(self) -> int:
        return self._index.get(self._me, UNDEFINED)

    @property
    def size(self) -> int:
        return len(self._members)

    @property
    def rank(self) -> int:
        return self.Get_rank()

    def Translate_ranks(self, ranks: Sequence[int] | None = None, group: Group | None = None) -> list[int]:
        if ranks is None:
            ranks = range(len(self._members))
        if group is None:
            from . import runtime

            world = runtime.state.world
            group = Group(range(world.Get_size()) if world is not None else (), self._me)
        out = []
        for r in ranks:
            if r == UNDEFINED or r < 0:  # PROC_NULL and friends translate to themselves
                out.append(r)
                continue
            out.append(group._index.get(self._world(r), UNDEFINED))
        return out

    def Compare(self, group: Group) -> int:
        if self._members == group._members:
            return IDENT
        if set(self._members) == set(group._members):
            return SIMILAR
        return UNEQUAL

    # ------------------------------------------------------------ constructors
    def Dup(self) -> Group:
        return Group(self._members, self._me)

    def Incl(self, ranks: Sequence[int]) -> Group:
        ranks = list(ranks)
        if len(set(ranks)) != len(ranks):
            raise err.Exception(err.ERR_RANK, f"Group.Incl: repeated ranks in {ranks}")
        return Group([self._world(r) for r in ranks], self._me)

    def Excl(self, ranks: Sequence[int]) -> Group:
        drop = set()
        for r in ranks:
            self._world(r)
            if r in drop:
                raise err.Exception(err.ERR_RANK, f"Group.Excl: rank {r} listed twice")
            drop.add(r)
        return Group([w for i, w in enumerate(self._members) if i not in drop], self._me)

    def Range_incl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        return self.Incl(_expand(ranks))

    def Range_excl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        return self.Excl(_expand(ranks))

    @classmethod
    def Union(cls, group1: Group, group2: Group) -> Group:
        extra = [w for w in group2._members if w not in group1._index]
        return cls(group1._members + tuple(extra), group1._me)

    @classmethod
    def Intersection(cls, group1: Group, group2: Group) -> Group:
        return cls([w for w in group1._members if w in group2._index], group1._me)

    Intersect = Intersection

    @classmethod
    def Difference(cls, group1: Group, group2: Group) -> Group:
        return cls([w for w in group1._members if w not in group2._index], group1._me)

    def Free(self) -> None:
        pass

    free = Free

    # ------------------------------------------------------------------ misc
    def _world(self, rank: int) -> int:
        if not 0 <= rank < len(self._members):
            raise err.Exception(err.ERR_RANK, f"invalid rank {rank} for a group of size {len(self._members)}")
        return self._members[rank]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and other._members == self._members

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Group {list(self._members)}>"


def _expand(ranges: Sequence[tuple[int, int, int]]) -> list[int]:
    out = []
    for first, last, stride in ranges:
        if stride == 0:
            raise err.Exception(err.ERR_ARG, "Group range with stride 0")
        out.extend(range(first, last + (1 if stride > 0 else -1), stride))
    return out


class _NullGroup(Group):
    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<fmpi.MPI.Group GROUP_NULL>"


GROUP_EMPTY = Group(())
GROUP_NULL = _NullGroup(())

__all__ = ["CONGRUENT", "GROUP_EMPTY", "GROUP_NULL", "IDENT", "SIMILAR", "UNEQUAL", "Group"]
