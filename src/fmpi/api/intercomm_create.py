"""Making intercommunicators (and communicators from groups) agree on a context id on every member.

``Intracomm.Create_intercomm(local_leader, peer_comm, remote_leader, tag)``:
each group's leader proposes an id derived from its own communicator; the two
leaders swap (local group, proposal) through `peer_comm`'s world ranks, on a
context of their own derived from `peer_comm` (so the swap never matches the
program's messages on `peer_comm`) under the program's `tag`; both take an id
derived from the pair of proposals, with ``INTER_BIT`` set, and each leader
broadcasts it with the remote group to its own group.

``Intercomm.Create_from_groups`` and ``Intracomm.Create_from_group`` need no
message at all: every member is given both groups (or the one group) and the
string tag, and takes an id derived from them and from how many times it made
a communicator from those same arguments before (MPI has all members make
the same such calls in the same order).
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any

from ..transport.requests import TransportError
from ..wire import pickle_oob as serialize
from . import exceptions as err
from . import runtime
from .comm import Comm
from .constants import TAG_UB
from .group import Group
from .intracomm import Intracomm, _child_context

if TYPE_CHECKING:
    from .intercomm import Intercomm

_made_from_groups: dict[tuple, itertools.count] = {}
_made_lock = threading.Lock()


def create_intercomm(local: Intracomm, local_leader: int, peer: Comm, remote_leader: int, tag: int) -> Intercomm:
    from .intercomm import INTER_BIT, Intercomm

    local_leader = local._root(local_leader)
    if not 0 <= tag <= TAG_UB:
        local._fail(err.ERR_TAG, f"invalid tag {tag} (must be 0..{TAG_UB})")
    local._child_seq += 1
    proposal = _child_context(local._ctx, local._child_seq, "intercomm")
    agreed = None
    if local.rank == local_leader:
        remote_group, theirs = _swap_with_leader(local, peer, remote_leader, tag, (local._group, proposal))
        if set(remote_group) & set(local._group):
            local._fail(err.ERR_COMM, "Create_intercomm: the local and remote groups overlap")
        agreed = (remote_group, _child_context(min(proposal, theirs), max(proposal, theirs), "agreed") | INTER_BIT)
    remote_group, context = local.bcast(agreed, root=local_leader)
    inter = Intercomm(local._engine, local._group, context, "", remote_group)
    inter._errhandler = local._errhandler
    return inter


def _swap_with_leader(local: Intracomm, peer: Comm, remote_leader: int, tag: int, mine: Any) -> Any:
    """Send `mine` to process `remote_leader` of `peer` and receive what it sends us."""
    if peer is None or not isinstance(peer, Comm) or not peer:
        local._fail(err.ERR_COMM, "Create_intercomm: peer_comm must be a communicator that holds both leaders")
    world = peer._dest(remote_leader)
    bridge = _child_context(peer._ctx, 0, "intercomm-bridge")
    engine = local._engine
    try:
        op = engine.sendrecv(world, world, bridge, tag, serialize.dumps(mine), None)
    except TransportError as exc:
        local._transport_failed(exc)
    return serialize.loads(op.payload)


def _next_from(key: tuple) -> int:
    """How many communicators this process made from `key` before (each member counts alike)."""
    with _made_lock:
        return next(_made_from_groups.setdefault(key, itertools.count()))


def create_from_groups(
    local_group: Group, local_leader: int, remote_group: Group | None, remote_leader: int, stringtag: str, errhandler: Any
) -> Intercomm:
    from .intercomm import INTER_BIT, Intercomm

    engine = runtime.state.engine
    local, remote = local_group._members, (remote_group._members if remote_group is not None else ())
    for group, leader in ((local, local_leader), (remote, remote_leader)):
        if not 0 <= leader < len(group):
            raise err.Exception(err.ERR_RANK, f"Create_from_groups: leader {leader} is not in a group of {len(group)}")
    if engine.rank not in local or set(local) & set(remote):
        raise err.Exception(err.ERR_GROUP, "Create_from_groups: this process must be in the local group only")
    key = ("inter", stringtag, min(local, remote), max(local, remote))
    context = _child_context(0, _next_from(key), key) | INTER_BIT
    inter = Intercomm(engine, local, context, "", remote)
    if errhandler is not None:
        inter._errhandler = errhandler
    return inter


def create_from_group(group: Group, stringtag: str, errhandler: Any) -> Intracomm:
    engine = runtime.state.engine
    members = group._members
    if engine.rank not in members:
        raise err.Exception(err.ERR_GROUP, "Create_from_group: this process is not in the group")
    key = ("intra", stringtag, members)
    comm = Intracomm(engine, members, _child_context(0, _next_from(key), key), "")
    if errhandler is not None:
        comm._errhandler = errhandler
    return comm
