"""``MPI.Comm``: identity and point-to-point communication.

A communicator is a group (its ranks' world ranks) plus two transport
contexts: one for point-to-point traffic and one for collectives, so the two
can never match each other's messages. The transport speaks world ranks; the
communicator translates in both directions. Collective operations are
``Intracomm``'s and ``Intercomm``'s; their algorithms are in ``fmpi.collectives``.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Self

from ..transport.engine import Engine
from ..transport.requests import Op, RecvOp, TransportError
from ..wire import pickle_oob as serialize
from . import exceptions as err
from .buffers import message, message_view, receive_target
from .comm_handle import CommHandle, fmpi_class
from .arguments import c_int
from .constants import ANY_SOURCE, ANY_TAG, IDENT, PROC_NULL, TAG_UB, UNEQUAL
from .errhandler import ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN
from .fault_tolerance import FaultTolerance
from .group import Group
from .keyvals import CommAttributes
from .message import Message, mprobe
from .object_p2p import ObjectP2P
from .persistent import PersistentP2P
from .request import Request, raise_mpi
from .sendrecv import NonblockingSendrecv
from .status import Status


class Comm(ObjectP2P, PersistentP2P, NonblockingSendrecv, CommAttributes, FaultTolerance, CommHandle):
    """Communicator: a group of processes and a context in which they communicate."""
    def __new__(cls, comm: Comm | None = None, *args: Any, **kwargs: Any) -> Self:
        """\nMake another Python handle on communicator `comm` (``MPI.Intracomm(comm)``, pkl5's subclasses too).

        It shares the instance dict, so both see one state (the collective call counter above all), as two mpi4py
        handles share one MPI_Comm."""
        if comm is not None and not isinstance(comm, (Comm, Engine)):
            raise TypeError(f"expecting a communicator, not {type(comm).__name__}")
        obj = super().__new__(cls)
        if isinstance(comm, Comm):
            if cls._inter is not None and comm._inter is not None and cls._inter != comm._inter:
                kinds = ("an intracommunicator", "an intercommunicator")
                raise TypeError(f"{cls.__name__} cannot be a handle on {kinds[comm._inter]}")
            obj.__dict__ = comm.__dict__
        return obj

    #: True for intercommunicators, False for intracommunicators, None for the base class.
    _inter: bool | None = None

    def __init__(self, engine: Engine | Comm | None = None, group: tuple[int, ...] = (), context: int = 0, name: str = "") -> None:
        if isinstance(engine, Comm):
            return  # a handle on an existing communicator: __new__ did it all
        self._kind = fmpi_class(type(self))  # what a handle of MPI.Comm itself on it works through (_actual)
        self._engine = engine
        self._group = group
        self._peers = group  # the world ranks a point-to-point rank names (an intercommunicator's: its remote group)
        self._index = {w: i for i, w in enumerate(group)}
        self._rank = self._index.get(engine.rank, -1) if engine is not None else -1
        self._ctx = context
        self._coll_ctx = context + 1  # collectives travel in their own context
        self._name = name
        self._errhandler = ERRORS_RETURN  # what mpi4py installs on its communicators
        self._coll_seq = 0
        self._child_seq = 0
        if engine is not None:  # names for the hang diagnosis (FMPI_TIMEOUT); weak: a freed comm may go
            me = weakref.ref(self)
            size = len(group)
            engine.waits.labels[context] = lambda: getattr(me(), "_name", "") or f"a communicator of {size} ranks"

    # -------------------------------------------------------------- identity
    def Get_rank(self) -> int:
        """\nReturn the rank of this process in the communicator."""
        self._live()
        return self._rank

    def Get_size(self) -> int:
        """\nReturn the number of processes in the communicator."""
        self._live()
        return len(self._group)

    @property
    def rank(self) -> int:
        return self._rank

    def Get_group(self) -> Group:
        """\nReturn the group of the communicator's processes."""
        self._live()
        return Group(self._group, self._engine.rank)

    @property
    def group(self) -> Group:
        return self.Get_group()

    @property
    def size(self) -> int:
        return len(self._group)

    def Get_name(self) -> str:
        """\nReturn the communicator's name."""
        return self._name

    def Set_name(self, name: str) -> None:
        """\nSet the communicator's name."""
        self._name = name

    name = property(Get_name, Set_name)

    def Is_inter(self) -> bool:
        """\nTell whether this is an intercommunicator (False)."""
        self._live()
        return False

    def Is_intra(self) -> bool:
        """\nTell whether this is an intracommunicator (True)."""
        self._live()
        return True

    @property
    def is_inter(self) -> bool:
        return False

    @property
    def is_intra(self) -> bool:
        return True

    def Compare(self, other: Comm) -> int:
        """\nCompare with communicator `other`: IDENT, CONGRUENT, SIMILAR or UNEQUAL."""
        self._live()
        if other is None or isinstance(other, Comm):
            (other if other is not None else COMM_NULL)._live()
        if other is self:
            return IDENT
        from .constants import CONGRUENT, SIMILAR

        if other._group == self._group:
            return IDENT if other._ctx == self._ctx else CONGRUENT
        if sorted(other._group) == sorted(self._group):
            return SIMILAR
        return UNEQUAL

    def Disconnect(self) -> None:
        """Wait for the communicator's traffic to be delivered (a barrier), then free it; the handle becomes
        COMM_NULL (intercommunicators: ``Intercomm.Disconnect``)."""
        self._live()
        self.Barrier()
        self.Free()

    def Abort(self, errorcode: int = 0) -> None:
        """\nAbort the whole job with `errorcode`."""
        from . import runtime

        runtime.abort(errorcode, f"MPI_Abort({errorcode}) called on {self._name or 'a communicator'}")

    def __eq__(self, other: object) -> bool:
        # Null handles (COMM_NULL, MPI.Intercomm(), a freed communicator; None, which fmpi returns where
        # MPI gives COMM_NULL) are all equal; live ones are equal when they are the same communicator.
        if other is None or (isinstance(other, Comm) and other._engine is None):
            return self._engine is None
        return isinstance(other, Comm) and self._engine is not None and other._ctx == self._ctx and other._group == self._group

    def __bool__(self) -> bool:
        return self._engine is not None

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def __repr__(self) -> str:
        if self._engine is None:
            return f"<fmpi.MPI.{type(self).__name__} COMM_NULL>"
        return f"<fmpi.MPI.{type(self).__name__} {self._name or hex(self._ctx)} rank {self._rank} of {self.size}>"

    # ------------------------------------------------------------ validation
    def _fail(self, code: int, text: str, cause: dict | None = None) -> None:
        """Report an error through the communicator's error handler (`cause`: see ``TransportError``)."""
        exc = err.Exception(code, text)
        exc._cause = cause
        if self._errhandler._user is not None:
            # MPI calls the user's handler, then the call returns; fmpi cannot resume the failed call
            # where it stopped, so it raises as under ERRORS_RETURN.
            self._errhandler._user.fn(self, code)
        elif self._errhandler is ERRORS_ARE_FATAL or self._errhandler is ERRORS_ABORT:
            from . import runtime

            print(f"fmpi: rank {self._rank}: {text}", file=sys.stderr)
            runtime.abort(code, text, cause)
        raise exc from None  # (the transport's error says it all; its traceback is noise)

    def _transport_failed(self, exc: TransportError) -> None:
        self._fail(err.from_class_name(exc.error_class), str(exc), exc.cause)

    # The envelopes check rank and tag in one call each: they sit on every message's path (a p2p round
    # trip of 8 B is ~20 µs here; three calls fewer in it are ~1 %, benchmarks/before_after.py).
    def _send_envelope(self, rank: int, tag: int) -> tuple[int, int]:
        """(world rank, tag) of a send to `rank` with `tag`, or the MPI error of either (the rank's first)."""
        if type(rank) is not int:
            rank = c_int(rank)
        if not 0 <= rank < len(self._peers):
            self._bad_rank(rank)
        if type(tag) is not int:
            tag = c_int(tag)
        if not 0 <= tag <= TAG_UB:
            self._fail(err.ERR_TAG, f"invalid send tag {tag} (must be 0..{TAG_UB})")
        return self._peers[rank], tag

    def _recv_envelope(self, rank: int, tag: int) -> tuple[int, int]:
        """(world rank or ANY_SOURCE, tag) of a receive from `rank` with `tag`, or the MPI error of either."""
        if rank != ANY_SOURCE:
            if type(rank) is not int:
                rank = c_int(rank)
            if not 0 <= rank < len(self._peers):
                self._bad_rank(rank)
            rank = self._peers[rank]
        if type(tag) is not int:
            tag = c_int(tag)
        if tag != ANY_TAG and not 0 <= tag <= TAG_UB:
            self._fail(err.ERR_TAG, f"invalid receive tag {tag} (must be ANY_TAG or 0..{TAG_UB})")
        return rank, tag

    def _dest(self, rank: int) -> int:
        return self._send_envelope(rank, 0)[0]

    def _bad_rank(self, rank: int) -> None:
        self._fail(err.ERR_RANK, f"invalid rank {rank} for a communicator of size {len(self._group)}")

    def _comm_rank(self, world: int) -> int:
        return self._index.get(world, world)

    # ------------------------------------------------------ transport calls
    def _start_send(self, parts: list[memoryview], dest: int, tag: int, sync: bool) -> Request:
        if dest == PROC_NULL:
            return Request.completed()
        world, tag = self._send_envelope(dest, tag)
        try:
            return Request(self._engine, self._engine.isend(world, self._ctx, tag, parts, sync))
        except TransportError as exc:
            self._transport_failed(exc)

    def _start_recv(self, buffer: memoryview | None, source: int, tag: int, unpickle: bool, unpack=None) -> Request:
        """(`unpack`: a staging buffer's, for datatypes with gaps: called with the bytes that arrived.)"""
        if source == PROC_NULL:
            return Request.completed()
        world, tag = self._recv_envelope(source, tag)
        try:
            op = self._engine.irecv(world, self._ctx, tag, buffer)
        except TransportError as exc:
            self._transport_failed(exc)

        def finish(op: Op) -> tuple[Any, int, int, int]:
            assert isinstance(op, RecvOp)
            value = None
            if op.cancelled:
                return None, ANY_SOURCE, ANY_TAG, 0
            if unpickle:
                value = serialize.loads(op.payload)
            elif unpack is not None:
                unpack(op.nbytes)
            return value, self._comm_rank(op.status_source), op.status_tag, op.nbytes

        return Request(self._engine, op, finish)

    # Blocking calls skip the Request: a small message's whole round trip is a
    # few dozen microseconds, and every Python call on the way is a visible share.
    def _send_now(self, parts: list[memoryview], dest: int, tag: int, sync: bool) -> None:
        if dest == PROC_NULL:
            return
        world, tag = self._send_envelope(dest, tag)
        try:
            op = self._engine.isend(world, self._ctx, tag, parts, sync)
            if not op.done:
                self._engine.wait(op)
            elif op.error is not None:
                raise op.error
        except TransportError as exc:
            self._transport_failed(exc)

    def _recv_now(self, buffer: memoryview | None, source: int, tag: int, unpickle: bool, status: Status | None) -> Any:
        if source == PROC_NULL:
            return self._complete(Request.completed(), status)
        world, tag = self._recv_envelope(source, tag)
        try:
            op = self._engine.irecv(world, self._ctx, tag, buffer)
            self._engine.wait(op)
        except TransportError as exc:
            if status is not None:
                status.error = err.from_class_name(exc.error_class)
            self._transport_failed(exc)
        if status is not None:
            status._set(self._comm_rank(op.status_source), op.status_tag, op.nbytes, 0, op.cancelled)
        return serialize.loads(op.payload) if unpickle else None

    def _complete(self, request: Request, status: Status | None) -> Any:
        try:
            return request.wait(status)
        except err.Exception as exc:
            self._fail(exc.Get_error_class(), str(exc), exc._cause)

    # ================================================= uppercase (buffer) p2p
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        """\nSend a buffer to `dest` (blocking); Bsend and Rsend are this same call."""
        self._send_now([message_view(buf, False)], dest, tag, False)

    Bsend = Rsend = Send

    def Ssend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """\nSend a buffer to `dest` and return once the receiver has matched it (synchronous mode)."""
        self._send_now([message_view(buf, False)], dest, tag, True)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """\nStart sending a buffer to `dest` and return its Request; Ibsend and Irsend are this same call."""
        return self._start_send([message_view(buf, False)], dest, tag, False)

    Ibsend = Irsend = Isend

    def Issend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """\nStart a synchronous-mode send to `dest` and return its Request."""
        return self._start_send([message(buf, False).view], dest, tag, True)

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> None:
        """\nReceive a message from `source` with `tag` into a buffer (blocking)."""
        view, unpack = receive_target(buf)
        if unpack is None:
            self._recv_now(view, source, tag, False, status)
        else:
            self._complete(self._start_recv(view, source, tag, False, unpack), status)

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """\nStart receiving a message from `source` with `tag` into a buffer and return its Request."""
        view, unpack = receive_target(buf)
        return self._start_recv(view, source, tag, False, unpack)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None) -> None:
        """\nSend a buffer to `dest` and receive a message from `source` into another, as one call."""
        # Both specs first: a bad send buffer must not leave a receive posted behind it.
        (recv_view, unpack), send_view = receive_target(recvbuf), message(sendbuf, False).view
        recv = self._start_recv(recv_view, source, recvtag, False, unpack)
        send = self._start_send([send_view], dest, sendtag, False)
        self._complete(recv, status)
        self._complete(send, None)

    def Sendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0, source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                         status: Status | None = None) -> None:
        """\nSend a buffer to `dest` and receive a message from `source` into the same buffer."""
        outgoing = memoryview(bytes(message(buf, False).view))  # the receive overwrites the buffer being sent
        view, unpack = receive_target(buf)
        recv = self._start_recv(view, source, recvtag, False, unpack)
        send = self._start_send([outgoing], dest, sendtag, False)
        self._complete(recv, status)
        self._complete(send, None)

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """\nWait until a message from `source` with `tag` can be received, without receiving it."""
        return self._probe(source, tag, status, blocking=True)

    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """\nTell whether a message from `source` with `tag` can be received now, without receiving it."""
        return self._probe(source, tag, status, blocking=False)

    def _probe(self, source: int, tag: int, status: Status | None, blocking: bool) -> bool:
        if source == PROC_NULL:
            if status is not None:
                status._set(PROC_NULL, ANY_TAG, 0)
            return True
        probe = self._engine.probe if blocking else self._engine.iprobe
        try:
            world, tag = self._recv_envelope(source, tag)
            found = probe(world, self._ctx, tag)
        except TransportError as exc:
            raise_mpi(exc)
        if found is None:
            return False
        if status is not None:
            status._set(self._comm_rank(found[0]), found[1], found[2])
        return True

    def Mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Message:
        """\nWait for a message from `source` with `tag` and return it as a Message only this process can receive."""
        return mprobe(self, source, tag, status, blocking=True)

    def Improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Message | None:
        """\nReturn a matched Message from `source` with `tag` if one can be received now, else None."""
        return mprobe(self, source, tag, status, blocking=False)

    mprobe = Mprobe
    improbe = Improbe


#: The null communicator handle: false, equal to every null handle (``MPI.Comm()``, a freed
#: communicator, None), and an ERR_COMM for anything asked of it, as in mpi4py.
COMM_NULL = Comm(None, (), 0, "MPI_COMM_NULL")
