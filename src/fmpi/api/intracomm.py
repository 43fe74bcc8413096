"""``MPI.Intracomm``: collective operations and communicator construction.

Collective methods live in two mixins (``collective_objects`` for the
lowercase API, ``collective_buffers`` for the uppercase one and its
non-blocking twins); they pick an algorithm through ``collectives.table`` and
hand it a ``Channel``, never touching the transport themselves.

Calls are numbered and run as ``collective_calls`` says (tags per call,
the background worker for non-blocking ones).

New communicators get a context id that every member derives on its own from
the parent's id, the parent's construction counter and what distinguishes
the new communicator (Split's color, Create's group), without a round of
agreement: see ``_child_context``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..collectives import allgather_recursive_doubling, table
from ..collectives.channel import Channel
from ..collectives.options import AllgatherOptions, Layout
from ..transport.engine import Engine
from . import exceptions as err
from . import runtime
from .arguments import c_int
from .collective_buffers import BufferCollectives
from .collective_calls import TAG_SPACE, CollectiveCalls
from .collective_entries import BufferCollectiveEntries
from .collective_exchange import ExchangeCollectives
from .collective_objects import ObjectCollectives
from .comm import Comm
from .constants import COMM_TYPE_SHARED, UNDEFINED
from .group import Group
from .request import Request

# mpi4py's (MPICH's) split types; all but UNDEFINED group the ranks by host here.
COMM_TYPE_HW_GUIDED = 2
COMM_TYPE_HW_UNGUIDED = 3
COMM_TYPE_RESOURCE_GUIDED = 4


class Intracomm(ObjectCollectives, BufferCollectives, CollectiveCalls, Comm):
    """Intracommunicator: communication within one group of processes."""
    _inter = False

    def __init__(self, engine: Engine | Comm | None = None, group: tuple[int, ...] = (), context: int = 0, name: str = "") -> None:
        if isinstance(engine, Comm):
            return  # a handle on an existing communicator (see Comm.__new__)
        super().__init__(engine, group, context, name)
        self._allreduce_memo = None
        self._blocking_channel: Channel | None = None  # (``_channel``)
        self._blocking_generation = -1
        self._create_group_seq: dict[tuple, int] = {}

    # ------------------------------------------------------------ machinery
    def _channel(self) -> Channel:
        """
        Return the channel of the next blocking collective call.

        One channel serves all of a communicator's blocking calls, stamped with each call's tag: MPI has every
        member make them one at a time, so two never overlap, and a small call need not build a channel (and ask
        whether a server takes part) every time. It is rebuilt when the collective table's settings change
        (``table.generation``), which may change that answer."""
        self._coll_seq += 1
        generation = table.generation()
        if self._blocking_generation != generation:
            self._blocking_channel = self._make_channel(0)
            self._blocking_generation = generation
        ch = self._blocking_channel
        ch.tag = self._coll_seq % TAG_SPACE
        return ch

    def _make_channel(self, tag: int) -> Channel:
        return Channel(self._engine, self._group, self._rank, self._coll_ctx, tag, *self._server())

    def _server(self) -> tuple[Any, str]:
        """
        Return (provider, this communicator's object names) for server-side collectives, or (None, "").

        A provider is used when the job runs relayed (FMPI_CHANNEL=relay, the same on every rank) or FMPI_COLL_ALGO
        forces a server form; the objects are named after the collective context, so every communicator (Split
        halves, Dups) has its own."""
        provider = runtime.state.server
        if provider is None or self._engine is None or len(self._group) < 2:
            return None, ""
        if self._engine.options.channel != "relay" and not table.server_forced():
            return None, ""
        return provider, f"{self._coll_ctx:x}"

    def _root(self, root: int) -> int:
        """`root` as an int (numpy integers and floats too, as mpi4py takes them), checked."""
        root = c_int(root)
        if not 0 <= root < self.size:
            self._fail(err.ERR_ROOT, f"invalid root {root} for a communicator of size {self.size}")
        return root

    # ----------------------------------------------------------- construction
    def _child(self, members: tuple[int, ...], context: int) -> Intracomm:
        child = Intracomm(self._engine, members, context, "")
        child._errhandler = self._errhandler  # a new communicator inherits its parent's handler (MPI)
        return child

    def Dup(self, info: Any = None) -> Intracomm:
        """
        Return a new communicator with the same group and copied attributes (collective)."""
        self._live()
        self._child_seq += 1
        return self._of_my_class(self._copy_attributes(self._dup_child(_child_context(self._ctx, self._child_seq, "dup"))))

    def _dup_child(self, context: int) -> Intracomm:
        """Dup's new communicator, before the attributes: a topology's keeps it (Topocomm)."""
        return self._child(self._group, context)

    Clone = Dup

    def Dup_with_info(self, info: Any) -> Intracomm:
        """
        Duplicate the communicator as Dup does; `info` is accepted and ignored."""
        return self.Dup()

    def Idup(self, info: Any = None) -> tuple[Intracomm, Request]:
        """
        Duplicate the communicator at once, as Dup does (every member calls it); the request is already complete."""
        return self.Dup(), Request.completed()

    def Idup_with_info(self, info: Any) -> tuple[Intracomm, Request]:
        """
        Duplicate the communicator as Idup does; `info` is accepted and ignored."""
        return self.Idup(info)

    def Split(self, color: int = 0, key: int = 0) -> Intracomm | None:
        """
        Split into communicators of the members of each color, ordered by (key, rank); UNDEFINED gets COMM_NULL."""
        self._live()
        self._child_seq += 1
        seq = self._child_seq
        size = self.size
        pairs = np.empty(2 * size, dtype=np.int64)
        pairs[2 * self._rank : 2 * self._rank + 2] = (color, key)
        self._allgather_ints(pairs)
        if color == UNDEFINED:
            return None
        members = sorted((int(pairs[2 * r + 1]), r) for r in range(size) if pairs[2 * r] == color)
        return self._child(tuple(self._group[r] for _, r in members), _child_context(self._ctx, seq, f"split:{color}"))

    def Split_type(self, split_type: int, key: int = 0, info: Any = None) -> Intracomm | None:
        """
        Split by type: COMM_TYPE_SHARED (and the hardware types) gives the ranks on this machine.

        UNDEFINED gives COMM_NULL. The machine is ``runtime.node_id``: on Lambda, the ranks of one function
        instance. Every rank makes the same collective calls whatever type it passes (some may pass UNDEFINED while
        others pass COMM_TYPE_SHARED), so the communicator's collectives stay in step."""
        host = None if split_type == UNDEFINED else runtime.node_id()
        names = self.allgather(host)
        return self.Split(UNDEFINED if host is None else names.index(host), key)

    def Create(self, group: Group) -> Intracomm | None:
        """
        Create a communicator of `group`'s members (collective over this communicator; others get COMM_NULL)."""
        self._live()
        self._child_seq += 1
        seq = self._child_seq
        members = group._members
        if not set(members) <= set(self._group):
            self._fail(err.ERR_GROUP, "Comm.Create: the group holds processes outside the communicator")
        if self._engine.rank not in members:
            return None
        return self._child(members, _child_context(self._ctx, seq, f"create:{members}"))

    def Create_group(self, group: Group, tag: int = 0) -> Intracomm | None:
        """
        Create a communicator of `group`'s members (collective over `group` only)."""
        members = group._members
        if self._engine.rank not in members:
            return None
        key = (members, tag)
        n = self._create_group_seq.get(key, 0) + 1
        self._create_group_seq[key] = n
        return self._child(members, _child_context(self._ctx, n, f"group:{members}:{tag}"))

    def Create_intercomm(self, local_leader: int, peer_comm: Comm, remote_leader: int, tag: int = 0) -> Any:
        """
        Create an Intercomm between this group and the one whose leader is `remote_leader` in `peer_comm`.

        It is collective over this communicator; see ``intercomm_create``."""
        from .intercomm_create import create_intercomm

        return create_intercomm(self, local_leader, peer_comm, remote_leader, tag)

    def Accept(self, port_name: str, info: Any = None, root: int = 0) -> Any:
        """
        Wait at `port_name` (from ``MPI.Open_port``) for a group's Connect and return the Intercomm to it.

        It is collective; see ``ports``."""
        from .ports import accept

        return accept(self, port_name, root)

    def Connect(self, port_name: str, info: Any = None, root: int = 0) -> Any:
        """
        Join the group waiting at `port_name` in Accept and return the Intercomm to it.

        It is collective; see ``ports``."""
        from .ports import connect

        return connect(self, port_name, root)

    def Spawn(self, command: str, args: Any = None, maxprocs: int = 1, info: Any = None, root: int = 0,
              errcodes: list | None = None) -> Any:
        """
        Start `maxprocs` processes running `command` with `args` and return the Intercomm to them.

        It is collective; see ``spawn``."""
        from .spawn import spawn_multiple

        argv = args if args is None or isinstance(args, (str, bytes)) else [args]  # (one command's, as a list of one)
        return spawn_multiple(self, [command], argv, maxprocs, info, root, errcodes, single=True)

    def Spawn_multiple(self, command: Any, args: Any = None, maxprocs: Any = None, info: Any = None, root: int = 0,
                       errcodes: list | None = None) -> Any:
        """
        Start processes running several commands, as one job, and return the Intercomm to them (collective)."""
        from .spawn import spawn_multiple

        return spawn_multiple(self, command, args, maxprocs, info, root, errcodes)

    @classmethod
    def Create_from_group(cls, group: Group, stringtag: str = "org.mpi4py", info: Any = None,
                          errhandler: Any = None) -> Intracomm:
        """
        Create a communicator of `group`, made by its members alone (MPI 4)."""
        from .intercomm_create import create_from_group

        return create_from_group(group, stringtag, errhandler)

    def Create_cart(self, dims, periods=None, reorder: bool = False):
        """
        Create a communicator whose ranks sit on a Cartesian grid (Cartcomm); extra ranks get COMM_NULL."""
        from .topology import create_cart

        return create_cart(self, dims, periods, reorder)

    def Cart_map(self, dims, periods=None) -> int:
        """
        Return the rank this process would have on a Cartesian grid of `dims`, or UNDEFINED."""
        from .topology import cart_map

        return cart_map(self, dims, periods)

    def Create_graph(self, index, edges, reorder: bool = False):
        """
        Create a communicator whose ranks are the nodes of a graph (Graphcomm); extra ranks get COMM_NULL."""
        from .graph_topology import create_graph

        return create_graph(self, index, edges, reorder)

    def Graph_map(self, index, edges) -> int:
        """
        Return the rank this process would have in a graph of `index` and `edges`, or UNDEFINED."""
        from .graph_topology import graph_map

        return graph_map(self, index, edges)

    def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None, destweights=None, info=None,
                                   reorder: bool = False):
        """
        Create a Distgraphcomm in which each process names its own sources and destinations.

        `info` and `reorder` are accepted and ignored."""
        from .graph_topology import create_dist_graph_adjacent

        return create_dist_graph_adjacent(self, sources, destinations, sourceweights, destweights)

    def Create_dist_graph(self, sources, degrees, destinations, weights=None, info=None, reorder: bool = False):
        """
        Create a Distgraphcomm from edges that any process may name.

        `info` and `reorder` are accepted and ignored."""
        from .graph_topology import create_dist_graph

        return create_dist_graph(self, sources, degrees, destinations, weights)

    # ---------------------------------------------------------------- helpers
    def _allgather_ints(self, values: np.ndarray) -> None:
        """In-place allgather of equal int64 blocks (this rank's already set)."""
        block = values.nbytes // self.size
        opts = AllgatherOptions(memoryview(values.view(np.uint8)), Layout.even(self.size, block), 1 << 20)
        self._collective(lambda ch: allgather_recursive_doubling.allgather(ch, opts))


def _child_context(parent: int, seq: int, what: object) -> int:
    """A context id every member derives alike: from the parent's, a counter and what sets the child apart.

    Contexts come in pairs (p2p, collective), so ids are even. 62 bits of a
    hash make a collision between two live communicators vanishingly rare.
    """
    import hashlib

    digest = hashlib.blake2b(f"{parent}:{seq}:{what}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 2) << 1


__all__ = ["COMM_TYPE_HW_GUIDED", "COMM_TYPE_HW_UNGUIDED", "COMM_TYPE_RESOURCE_GUIDED", "COMM_TYPE_SHARED", "Intracomm"]


# mpi4py defines the collectives on Comm, and code calls them through it (mpi4py.util.pkl5 does
# ``MPI.Comm.Bcast(comm, ...)``); fmpi implements them for intracommunicators, its only kind.
# (BufferCollectives before the shared entry points: Comm.Allreduce is the intracommunicator's own.)
for _mixin in (ObjectCollectives, BufferCollectives, ExchangeCollectives, BufferCollectiveEntries):
    for _name, _fn in vars(_mixin).items():
        if not _name.startswith("_") and not hasattr(Comm, _name):
            setattr(Comm, _name, _fn)
