"""``MPI.Win``: one-sided communication windows — creation, synchronization, attributes.

A window is three private duplicates of its communicator: ``requests`` (what origins ask of a target; the
target's engine serves them where it reads them, see ``rma_target``), ``replies`` (the answers, each under a tag
the asking origin chose) and ``sync`` (fence barriers and the post/start/complete/wait notices). The
operations themselves are in ``rma_calls``.

Synchronization maps onto acknowledgements: a target answers an origin's FLUSH after everything that origin
sent before it, so ``Flush``, ``Unlock``, ``Fence`` and ``Complete`` end by flushing the targets the origin
touched since its last synchronization. Any answer says the same (a get's comes after everything sent before
it), so a target answered since is not flushed again, and Unlock of it sends the release without waiting.
Locks are granted by the target's engine (``rma_target``), so a passive target needs no help from its program.

Flavors: ``Create`` (the caller's memory), ``Allocate`` (the ``Win`` itself is a bytearray holding it: see
``win_allocated``), ``Allocate_shared`` (one file mapped by every rank of a communicator on one host:
``Shared_query`` returns a peer's segment, and loads and stores reach it directly) and ``Create_dynamic``
(``Attach``/``Detach``; displacements are addresses).
The memory model is ``WIN_UNIFIED``: requests are applied to the very memory the program reads — except
for windows whose memory lives on the relay (``win_relay``: ``WIN_SEPARATE``; each synchronization hook below
hands over to it).
"""

from __future__ import annotations

import itertools
import operator
import threading
from typing import Any

from . import exceptions as err
from . import keyvals, runtime
from .buffers import byte_view
from .constants import BOTTOM, PROC_NULL
from .errhandler import ERRORS_RETURN
from .info import Info
from .memory import buffer
from .packing import get_address
from .rma_calls import RmaCalls
from .rma_constants import MODE_NOPRECEDE
from .rma_constants import WIN_FLAVOR_ALLOCATE, WIN_FLAVOR_CREATE, WIN_FLAVOR_DYNAMIC, WIN_FLAVOR_SHARED
from .rma_target import FLUSH, LOCK, NO_ANSWER, UNLOCK, RmaError, TargetService
from .win_active import ActiveTarget
from .win_attributes import WinAttributes
from .win_fence import FenceCounts, counts, fence_by_counts
from .win_passive import PassiveTarget
from .win_memory import shared_segments, window_memory
from .win_relay import RelayMemory, wanted

_REPLY_TAGS = 1 << 20  # reply tags cycle through 1..2**20 (one per pending answer is enough)
_FENCE_TAG = _REPLY_TAGS + 1  # the own service's word to a Fence that waits (win_fence)


class _Window:
    """The state of a live window (a freed or null ``Win`` has none)."""

    def __init__(self, comm: Any, memory: Any, size: int, disp_unit: int, flavor: int, info: Any = None) -> None:
        self.sync, self.requests, self.replies = comm.Dup(), comm.Dup(), comm.Dup()
        self.view = byte_view(memory, True)[0] if size else memoryview(bytearray())
        # what tomemory() returns: the MPI.buffer of a Win subclass's Allocate, else a view of the memory
        self.memory = memory if isinstance(memory, buffer) else window_memory(self.view)
        self.size, self.disp_unit, self.flavor = size, disp_unit, flavor
        self.sizes: list[tuple[int, int]] = self.sync.allgather((size, disp_unit))
        self.me = self.sync.Get_rank()
        self.fence = FenceCounts(len(self.sizes))
        self.attached: list[tuple[int, memoryview]] = []  # dynamic windows: (address, memory)
        self.segments: list[Any] = []  # shared windows: every rank's segment
        self.touched: set[int] = set()  # targets sent operations (or a lock request) not answered since
        self.locked: set[int] = set()
        self.exposure: list[int] | None = None  # Post's group (window ranks), until Wait
        self.completed: set[int] = set()  # origins whose COMPLETED notice Test already took
        self.access: list[int] | None = None  # Start's group, until Complete
        self.tags = itertools.count()
        self.tag_lock = threading.Lock()
        self.name, self.info, self.errhandler = "", Info.Create(), ERRORS_RETURN
        self.attrs: dict[int, Any] = {}
        self.relay: RelayMemory | None = None  # the public copy on the relay (win_relay), or None: one local memory
        if flavor in (WIN_FLAVOR_CREATE, WIN_FLAVOR_ALLOCATE) and wanted(info):
            self.relay = RelayMemory(self)
            return
        self.service = TargetService(self.requests, self.replies, self.locate)
        # Origins' requests wait for this rank's next MPI call (a store into the fresh window comes first)
        self.requests._engine.next_call.add(self.service.release)

    def locate(self, disp: int) -> tuple[memoryview, int]:
        if self.flavor != WIN_FLAVOR_DYNAMIC:
            return self.view, disp * self.disp_unit
        for address, memory in self.attached:
            if address <= disp < address + len(memory):
                return memory, disp - address
        raise RmaError(f"address {disp:#x} is in no memory attached to the dynamic window")


class Win(RmaCalls, ActiveTarget, PassiveTarget, WinAttributes):
    """Window: memory of each process of a communicator that the others may access (one-sided communication)."""
    def __init__(self, win: Win | None = None) -> None:
        """``Win()``: a null handle; ``Win(win)``: another handle on `win`'s window."""
        if win is not None and not isinstance(win, Win):
            raise TypeError(f"expected a Win, not {type(win).__name__}")
        self._w: _Window | None = win._w if win is not None else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Win) and self._w is other._w

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def __bool__(self) -> bool:
        return self._w is not None

    def __enter__(self) -> Win:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._w is not None:
            self.Free()

    # =============================================================== creation
    @classmethod
    def Create(cls, memory: Any, disp_unit: int = 1, info: Any = None, comm: Any = None) -> Win:
        """
        Create a window over `memory` on every process of `comm` (collective)."""
        comm = _comm(comm)
        if memory is BOTTOM:
            memory = None
        size = len(byte_view(memory, True)[0]) if memory is not None else 0
        return cls._of(_Window(comm, memory, size, _unit(disp_unit), WIN_FLAVOR_CREATE, info))

    @classmethod
    def Allocate(cls, size: int, disp_unit: int = 1, info: Any = None, comm: Any = None) -> Win:
        """
        Create a window over `size` new bytes on every process of `comm` (collective)."""
        from .win_allocated import allocate  # (it subclasses Win)

        return allocate(cls, _comm(comm), _size(size), _unit(disp_unit), info)

    @classmethod
    def Allocate_shared(cls, size: int, disp_unit: int = 1, info: Any = None, comm: Any = None) -> Win:
        """
        Create a window over `size` new bytes per process, loaded and stored directly by all of `comm`."""
        comm = _comm(comm)
        segments = shared_segments(comm, _size(size))
        mine = segments[comm.Get_rank()]
        window = _Window(comm, mine, len(mine), _unit(disp_unit), WIN_FLAVOR_SHARED)
        window.segments = segments
        return cls._of(window)

    @classmethod
    def Create_dynamic(cls, info: Any = None, comm: Any = None) -> Win:
        """
        Create a window with no memory yet, which each process then attaches (collective)."""
        return cls._of(_Window(_comm(comm), None, 0, 1, WIN_FLAVOR_DYNAMIC))

    @classmethod
    def _of(cls, window: _Window) -> Win:
        win = cls()
        win._w = window
        return win

    def _live(self) -> _Window:
        if self._w is None:
            raise err.Exception(err.ERR_WIN, "invalid window (WIN_NULL or freed)")
        return self._w

    def Free(self) -> None:
        """
        Free the window once every process is done with it (collective): the handle becomes null."""
        w = self._live()
        keyvals.delete_all("win", self, w.attrs)  # (MPI runs the attributes' delete_fn first)
        if w.relay is not None:
            w.relay.free()
        else:
            w.requests._engine.next_call.discard(w.service.release)
            w.service.release()  # (Free is this rank's MPI call, if it made none since the creation)
            w.sync.Barrier()  # every rank is past its last epoch: nothing more comes to any target
            w.service.close()
        for comm in (w.sync, w.requests, w.replies):
            comm.Free()
        self._w = None

    def free(self) -> None:
        """
        Free the window unless it is null or already freed (mpi4py's lowercase form)."""
        if self._w is not None:
            self.Free()

    def __buffer__(self, flags: int) -> memoryview:
        """
        Return this rank's window memory for ``memoryview(win)``, as mpi4py's ``Win`` (``mpi4py.util.sync``).
        Python 3.12+ (PEP 688) calls this; on 3.11 Python classes cannot export buffers: only Allocate's windows do."""
        return memoryview(self._live().view)

    def Attach(self, memory: Any) -> None:
        """
        Attach `memory` to a dynamic window."""
        w = self._live()
        if w.flavor != WIN_FLAVOR_DYNAMIC:
            raise err.Exception(err.ERR_RMA_FLAVOR, "Win.Attach needs a window from Win.Create_dynamic")
        view = byte_view(memory, True)[0]
        w.attached.append((get_address(view), view))

    def Detach(self, memory: Any) -> None:
        """
        Detach `memory` from a dynamic window."""
        w = self._live()
        address = get_address(byte_view(memory, True)[0])
        kept = [(a, m) for a, m in w.attached if a != address]
        if len(kept) == len(w.attached):
            raise err.Exception(err.ERR_RMA_ATTACH, "Win.Detach: this memory is not attached to the window")
        w.attached = kept

    def Shared_query(self, rank: int) -> tuple[Any, int]:
        """
        Return (the memory, the displacement unit) of `rank`'s part of a shared window."""
        w = self._live()
        if w.flavor != WIN_FLAVOR_SHARED:
            raise err.Exception(err.ERR_RMA_FLAVOR, "Win.Shared_query needs a window from Win.Allocate_shared")
        if rank == PROC_NULL:  # MPI: the first segment of non-zero size
            rank = next((r for r, s in enumerate(w.segments) if len(s)), 0)
        return w.segments[rank], w.sizes[rank][1]

    def tomemory(self) -> Any:
        """
        Return this process's window memory."""
        return self._live().memory

    # ======================================================== helpers (calls)
    def _target(self, rank: int) -> None:
        w = self._live()
        if not 0 <= rank < len(w.sizes):
            raise err.Exception(err.ERR_RANK, f"invalid target rank {rank} for a window of {len(w.sizes)} ranks")

    def _check_range(self, rank: int, disp: int, count: int, datatype: Any) -> None:
        self._target(rank)
        w = self._w
        if w.flavor == WIN_FLAVOR_DYNAMIC or count == 0:
            return
        size, unit = w.sizes[rank]
        _, extent = datatype.Get_extent()
        true_lb, true_extent = datatype.Get_true_extent()
        start = disp * unit + true_lb
        end = disp * unit + (count - 1) * extent + true_lb + true_extent
        if disp < 0 or start < 0 or end > size:
            raise err.Exception(err.ERR_RMA_RANGE, f"{count} x {datatype.name or 'datatype'} at displacement {disp} "
                                f"(unit {unit}) fall outside the {size}-byte window of rank {rank}")

    def _send_request(self, rank: int, kind: int, args: tuple) -> None:
        w = self._w
        if w.relay is not None:
            w.relay.send(rank, kind, args)
            return
        if rank == w.me:
            self._local(kind, args)
            return
        w.requests.send(args, rank, w.fence.tag(kind, rank))
        w.touched.add(rank)

    def _local(self, kind: int, args: tuple) -> Any:
        try:
            return self._w.service.local(kind, args)
        except ValueError as exc:
            raise err.Exception(err.ERR_RMA_RANGE, str(exc)) from None

    def _ask(self, rank: int, kind: int, args: tuple) -> Any:
        """Send a request the target answers and wait for the answer (on this rank's own window: in place)."""
        w = self._live()
        if w.relay is not None:
            return w.relay.ask(rank, kind, args)
        if rank == w.me and kind not in (LOCK, UNLOCK, FLUSH):
            return self._local(kind, (*args, 0))
        with w.tag_lock:
            tag = 1 + next(w.tags) % _REPLY_TAGS
        w.requests.send((*args, tag), rank, w.fence.tag(kind, rank))
        answer = w.replies.recv(source=rank, tag=tag)
        if isinstance(answer, RmaError):
            raise err.Exception(err.ERR_RMA_RANGE, str(answer))
        if kind not in (LOCK, UNLOCK, FLUSH) and w.flavor != WIN_FLAVOR_DYNAMIC:
            # The target answers in order: what this rank sent it before is applied, and its lock granted; a
            # Flush now has nothing to wait for. (A dynamic window's target may hold an error of an earlier
            # put for the next FLUSH answer: there it still goes.)
            w.touched.discard(rank)
        return answer

    def _flush(self, ranks: Any, kind: int = FLUSH) -> None:
        """FLUSH (or UNLOCK) each of `ranks`: every request goes out before any answer is awaited, so a Fence or a
        Flush_all after operations on many targets takes one round trip, not one per target."""
        w = self._w
        if w.relay is not None:
            if kind == UNLOCK:
                w.relay.unlock(list(ranks))
            else:
                w.relay.complete()
            return
        asked = []
        for rank in ranks:
            if rank == w.me and kind == FLUSH:
                continue  # (this rank's operations on its own window are applied when called)
            if kind == UNLOCK and rank not in w.touched and rank != w.me and w.flavor != WIN_FLAVOR_DYNAMIC:
                # Everything sent to it is answered and the lock granted: nothing to wait for, the target
                # only has to hear the release (before anything this rank sends it later).
                w.requests.send((NO_ANSWER,), rank, w.fence.tag(UNLOCK, rank))
                continue
            w.touched.discard(rank)
            with w.tag_lock:
                tag = 1 + next(w.tags) % _REPLY_TAGS
            w.requests.send((tag,), rank, w.fence.tag(kind, rank))
            asked.append((rank, tag))
        failed = [f"rank {rank}: {answer}" for rank, tag in asked if (answer := w.replies.recv(source=rank, tag=tag))]
        if failed:
            raise err.Exception(err.ERR_RMA_RANGE, "; ".join(failed))

    # ========================================================= synchronization
    def Fence(self, assertion: int = 0) -> None:
        """
        Close one access epoch and open the next on every process of the window (collective)."""
        w = self._live()
        if w.relay is not None:
            w.relay.fence()
            return
        if assertion & MODE_NOPRECEDE:
            w.sync.Barrier()  # (nothing to complete: only the next epoch's start to agree on)
        elif counts(w):
            fence_by_counts(w, _FENCE_TAG)
        else:
            self._flush(sorted(w.touched))
            w.sync.Barrier()

    def __repr__(self) -> str:
        return "<fmpi.MPI.Win WIN_NULL>" if self._w is None else f"<fmpi.MPI.Win {self._w.name or id(self._w):}>"


def _comm(comm: Any) -> Any:
    """The window's communicator (mpi4py's default: COMM_SELF)."""
    return runtime.state.self_comm if comm is None else comm


def _unit(disp_unit: int) -> int:
    unit = operator.index(disp_unit)
    if unit <= 0:
        raise err.Exception(err.ERR_DISP, f"invalid displacement unit {unit}")
    return unit


def _size(size: int) -> int:
    nbytes = operator.index(size)
    if nbytes < 0:
        raise err.Exception(err.ERR_SIZE, f"invalid window size {nbytes}")
    return nbytes


WIN_NULL = Win()
