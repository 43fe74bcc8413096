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
from .handles import Handled


class Group(Handled):
    """Group: an ordered set of processes."""
    # `_same`: the group this handle is another handle on (``Group(group)``), None for an original:
    # what their integer handle names (handles.py).
    __slots__ = ("_index", "_me", "_members", "_null", "_same", "__weakref__")

    def __init__(self, members: Sequence[int] | Group | None = None, me: int = -1) -> None:
        """
        Make a group of `members` (world ranks), or a handle as in mpi4py.

        ``Group()`` is a null handle (== GROUP_NULL) and ``Group(group)`` another handle on `group`."""
        self._same: Group | None = None
        if isinstance(members, Group):
            self._same = members._same or members
            members, me, self._null = members._members, members._me, members._null
        elif members is not None and not isinstance(members, (list, tuple, range)):
            raise TypeError(f"expecting a group, not {type(members).__name__}")
        else:
            self._null = members is None
        self._members = tuple(members or ())
        self._me = me  # this process's world rank
        self._index = {w: i for i, w in enumerate(self._members)}

    # -------------------------------------------------------------- accessors
    def Get_size(self) -> int:
        """
        Return the number of processes in the group."""
        return len(self._live()._members)

    def Get_rank(self) -> int:
        """
        Return this process's rank in the group, or UNDEFINED if it is not a member."""
        return self._live()._index.get(self._me, UNDEFINED)

    @property
    def size(self) -> int:
        return self.Get_size()

    @property
    def rank(self) -> int:
        return self.Get_rank()

    def Translate_ranks(self, ranks: Sequence[int] | None = None, group: Group | None = None) -> list[int]:
        """
        Return the ranks in `group` (default: the world's) of the processes with `ranks` in this group."""
        self._live()
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
        """
        Compare with `group`: IDENT (same members, same order), SIMILAR (same members) or UNEQUAL."""
        self._live(), group._live()
        if self._members == group._members:
            return IDENT
        if set(self._members) == set(group._members):
            return SIMILAR
        return UNEQUAL

    # ------------------------------------------------------------ constructors
    def Dup(self) -> Group:
        """
        Return a new group with the same members."""
        self._live()
        return Group(self._members, self._me)

    def Incl(self, ranks: Sequence[int]) -> Group:
        """
        Return the group of the members with `ranks`, in that order."""
        ranks = list(ranks)
        self._live()
        if len(set(ranks)) != len(ranks):
            raise err.Exception(err.ERR_RANK, f"Group.Incl: repeated ranks in {ranks}")
        return Group([self._world(r) for r in ranks], self._me)

    def Excl(self, ranks: Sequence[int]) -> Group:
        """
        Return the group of the members without `ranks`, in their order here."""
        drop = set()
        self._live()
        for r in ranks:
            self._world(r)
            if r in drop:
                raise err.Exception(err.ERR_RANK, f"Group.Excl: rank {r} listed twice")
            drop.add(r)
        return Group([w for i, w in enumerate(self._members) if i not in drop], self._me)

    def Range_incl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        """
        Return the group of the members in the (first, last, stride) ranges `ranks`."""
        return self.Incl(_expand(ranks))

    def Range_excl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        """
        Return the group of the members outside the (first, last, stride) ranges `ranks`."""
        return self.Excl(_expand(ranks))

    @classmethod
    def Union(cls, group1: Group, group2: Group) -> Group:
        """
        Return the members of `group1`, then those of `group2` not in `group1`."""
        group1._live(), group2._live()
        extra = [w for w in group2._members if w not in group1._index]
        return cls(group1._members + tuple(extra), group1._me)

    @classmethod
    def Intersection(cls, group1: Group, group2: Group) -> Group:
        """
        Return the members of `group1` that are also in `group2`, in `group1`'s order."""
        group1._live(), group2._live()
        return cls([w for w in group1._members if w in group2._index], group1._me)

    Intersect = Intersection

    @classmethod
    def Difference(cls, group1: Group, group2: Group) -> Group:
        """
        Return the members of `group1` that are not in `group2`, in `group1`'s order."""
        group1._live(), group2._live()
        return cls([w for w in group1._members if w not in group2._index], group1._me)

    def Free(self) -> None:
        """
        Free the group: the handle becomes GROUP_NULL (GROUP_EMPTY stays itself, as mpi4py keeps predefined handles)."""
        if self._null:
            raise err.Exception(err.ERR_GROUP, "Free on a null group (GROUP_NULL)")
        if self is not GROUP_EMPTY:
            self._members, self._index, self._null = (), {}, True

    def free(self) -> None:
        """
        Free unless null or predefined (mpi4py's lowercase form)."""
        if self and self is not GROUP_EMPTY:
            self.Free()

    # ------------------------------------------------------------------ misc
    def _live(self) -> Group:
        """This group, unless it is null: then MPI.Exception(ERR_GROUP), as MPICH's every group call."""
        if self._null:
            raise err.Exception(err.ERR_GROUP, "invalid group: MPI.GROUP_NULL")
        return self

    def _world(self, rank: int) -> int:
        if not 0 <= rank < len(self._members):
            raise err.Exception(err.ERR_RANK, f"invalid rank {rank} for a group of size {len(self._members)}")
        return self._members[rank]

    def _referent(self) -> Group:
        return self._same or self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and other._null == self._null and other._members == self._members

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def __bool__(self) -> bool:
        return not self._null

    def __repr__(self) -> str:
        return "<fmpi.MPI.Group GROUP_NULL>" if self._null else f"<fmpi.MPI.Group {list(self._members)}>"

    def __reduce__(self) -> tuple:
        """
        Pickle GROUP_NULL and GROUP_EMPTY by name (another handle on them, as another handle).

        Any other group names processes of this job only and cannot be pickled, as in mpi4py."""
        for name, predefined in (("GROUP_NULL", GROUP_NULL), ("GROUP_EMPTY", GROUP_EMPTY)):
            if self is predefined:
                return (_predefined, (name,))
            if self == predefined:
                return (type(self), (_predefined(name),))
        raise ValueError(f"cannot pickle {self!r}: only GROUP_NULL and GROUP_EMPTY can be, as in mpi4py")


def _expand(ranges: Sequence[tuple[int, int, int]]) -> list[int]:
    out = []
    for first, last, stride in ranges:
        if stride == 0:
            raise err.Exception(err.ERR_ARG, "Group range with stride 0")
        out.extend(range(first, last + (1 if stride > 0 else -1), stride))
    return out


def _predefined(name: str) -> Group:
    return GROUP_NULL if name == "GROUP_NULL" else GROUP_EMPTY


GROUP_EMPTY = Group(())
GROUP_NULL = Group()

__all__ = ["CONGRUENT", "GROUP_EMPTY", "GROUP_NULL", "IDENT", "SIMILAR", "UNEQUAL", "Group"]
