"""``MPI.Comm``: identity and point-to-point communication.

A communicator is a group (its ranks' world ranks) plus two transport
contexts: one for point-to-point traffic and one for collectives, so the two
can never match each other's messages. The transport speaks world ranks; the
communicator translates in both directions.

Collective operations live in ``collective_api`` (mixed into ``Intracomm``);
their algorithms in ``fmpi.collectives``.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Self

from ..transport.engine import Engine
from ..transport.requests import Op, RecvOp, TransportError
from ..wire import pickle_oob as serialize
from . import exceptions as err
from .buffers import message, message_view
from .comm_handle import CommHandle
from .constants import ANY_SOURCE, ANY_TAG, IDENT, PROC_NULL, TAG_UB, UNEQUAL
from .message import Message, mprobe
from .persistent import PersistentP2P
from .request import Request, raise_mpi
from .status import Status


class Errhandler:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Errhandler {self.name}>"

    def Free(self) -> None:
        pass


ERRORS_ARE_FATAL = Errhandler("ERRORS_ARE_FATAL")
ERRORS_RETURN = Errhandler("ERRORS_RETURN")
ERRORS_ABORT = Errhandler("ERRORS_ABORT")
ERRHANDLER_NULL = Errhandler("ERRHANDLER_NULL")


class Comm(PersistentP2P, CommHandle):
    def __new__(cls, comm: Comm | None = None, *args: Any, **kwargs: Any) -> Self:
        """``MPI.Intracomm(comm)`` (and subclasses such as mpi4py.util.pkl5's): another Python
        handle on the same communicator. It shares the instance dict, so both see one state
        (the collective call counter above all), as two mpi4py handles share one MPI_Comm."""
        obj = super().__new__(cls)
        if isinstance(comm, Comm):
            obj.__dict__ = comm.__dict__
        return obj

    def __init__(self, engine: Engine | Comm | None, group: tuple[int, ...] = (), context: int = 0, name: str = "") -> None:
        if isinstance(engine, Comm):
            return  # a handle on an existing communicator: __new__ did it all
        self._engine = engine
        self._group = group
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
        return self._rank

    def Get_size(self) -> int:
        return len(self._group)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return len(self._group)

    def Get_name(self) -> str:
        return self._name

    def Set_name(self, name: str) -> None:
        self._name = name

    name = property(Get_name, Set_name)

    def Is_inter(self) -> bool:
        return False

    def Is_intra(self) -> bool:
        return True

    @property
    def is_inter(self) -> bool:
        return False

    @property
    def is_intra(self) -> bool:
        return True

    def Get_errhandler(self) -> Errhandler:
        return self._errhandler

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        self._errhandler = errhandler

    def Get_attr(self, keyval: int) -> int | None:
        """The predefined attributes (TAG_UB, APPNUM, UNIVERSE_SIZE, ...); None for any other keyval,
        as for an attribute that is not set (fmpi has no user attribute caching)."""
        from . import constants as c
        from .exceptions import ERR_LASTCODE

        values = {TAG_UB: TAG_UB, c.APPNUM: 0, c.UNIVERSE_SIZE: self._engine.size if self._engine else 1,
                  c.WTIME_IS_GLOBAL: 0, c.IO: ANY_SOURCE, c.LASTUSEDCODE: ERR_LASTCODE}
        return values.get(keyval)

    def Compare(self, other: Comm) -> int:
        if other is self:
            return IDENT
        from .constants import CONGRUENT, SIMILAR

        if other._group == self._group:
            return IDENT if other._ctx == self._ctx else CONGRUENT
        if sorted(other._group) == sorted(self._group):
            return SIMILAR
        return UNEQUAL

    def Abort(self, errorcode: int = 0) -> None:
        from . import runtime

        runtime.abort(errorcode, f"MPI_Abort({errorcode}) called on {self._name or 'a communicator'}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Comm) and other._ctx == self._ctx and other._group == self._group

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<fmpi.MPI.{type(self).__name__} {self._name or hex(self._ctx)} rank {self._rank} of {self.size}>"

    # ------------------------------------------------------------ validation
    def _fail(self, code: int, text: str, cause: dict | None = None) -> None:
        """Report an error through the communicator's error handler (`cause`: see ``TransportError``)."""
        exc = err.Exception(code, text)
        exc._cause = cause
        if self._errhandler is ERRORS_ARE_FATAL or self._errhandler is ERRORS_ABORT:
            from . import runtime

            print(f"fmpi: rank {self._rank}: {text}", file=sys.stderr)
            runtime.abort(code, text, cause)
        raise exc from None  # (the transport's error says it all; its traceback is noise)

    def _transport_failed(self, exc: TransportError) -> None:
        self._fail(err.from_class_name(exc.error_class), str(exc), exc.cause)

    def _dest(self, rank: int) -> int:
        if not 0 <= rank < len(self._group):
            self._fail(err.ERR_RANK, f"invalid rank {rank} for a communicator of size {len(self._group)}")
        return self._group[rank]

    def _source(self, rank: int) -> int:
        if rank == ANY_SOURCE:
            return ANY_SOURCE
        return self._dest(rank)

    def _send_tag(self, tag: int) -> int:
        if not 0 <= tag <= TAG_UB:
            self._fail(err.ERR_TAG, f"invalid send tag {tag} (must be 0..{TAG_UB})")
        return tag

    def _recv_tag(self, tag: int) -> int:
        if tag != ANY_TAG and not 0 <= tag <= TAG_UB:
            self._fail(err.ERR_TAG, f"invalid receive tag {tag} (must be ANY_TAG or 0..{TAG_UB})")
        return tag

    def _comm_rank(self, world: int) -> int:
        return self._index.get(world, world)

    # ------------------------------------------------------ transport calls
    def _start_send(self, parts: list[memoryview], dest: int, tag: int, sync: bool) -> Request:
        if dest == PROC_NULL:
            return Request.completed()
        world, tag = self._dest(dest), self._send_tag(tag)
        try:
            return Request(self._engine, self._engine.isend(world, self._ctx, tag, parts, sync))
        except TransportError as exc:
            self._transport_failed(exc)

    def _start_recv(self, buffer: memoryview | None, source: int, tag: int, unpickle: bool) -> Request:
        if source == PROC_NULL:
            return Request.completed()
        world, tag = self._source(source), self._recv_tag(tag)
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
            return value, self._comm_rank(op.status_source), op.status_tag, op.nbytes

        return Request(self._engine, op, finish)

    # Blocking calls skip the Request: a small message's whole round trip is a
    # few dozen microseconds, and every Python call on the way is a visible share.
    def _send_now(self, parts: list[memoryview], dest: int, tag: int, sync: bool) -> None:
        if dest == PROC_NULL:
            return
        world, tag = self._dest(dest), self._send_tag(tag)
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
        world, tag = self._source(source), self._recv_tag(tag)
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

    # ================================================= lowercase (pickle) p2p
    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._send_now(serialize.dumps(obj), dest, tag, False)

    def bsend(self, obj: Any, dest: int, tag: int = 0) -> None:
        self.send(obj, dest, tag)

    def ssend(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._send_now(serialize.dumps(obj), dest, tag, True)

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        return self._start_send(serialize.dumps(obj), dest, tag, False)

    ibsend = isend

    def issend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        return self._start_send(serialize.dumps(obj), dest, tag, True)

    def recv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Any:
        return self._recv_now(None, source, tag, True, status)

    def irecv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        return self._start_recv(None, source, tag, True)

    def sendrecv(
        self,
        sendobj: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> Any:
        recv = self._start_recv(None, source, recvtag, True)
        send = self._start_send(serialize.dumps(sendobj), dest, sendtag, False)
        value = self._complete(recv, status)
        self._complete(send, None)
        return value

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        return self.Probe(source, tag, status)

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        return self.Iprobe(source, tag, status)

    # ================================================= uppercase (buffer) p2p
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._send_now([message_view(buf, False)], dest, tag, False)

    Bsend = Rsend = Send

    def Ssend(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._send_now([message_view(buf, False)], dest, tag, True)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        return self._start_send([message_view(buf, False)], dest, tag, False)

    Ibsend = Irsend = Isend

    def Issend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        return self._start_send([message(buf, False).view], dest, tag, True)

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> None:
        self._recv_now(message_view(buf, True), source, tag, False, status)

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        return self._start_recv(message_view(buf, True), source, tag, False)

    def Sendrecv(
        self,
        sendbuf: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        # Both specs first: a bad send buffer must not leave a receive posted behind it.
        recv_view, send_view = message(recvbuf, True).view, message(sendbuf, False).view
        recv = self._start_recv(recv_view, source, recvtag, False)
        send = self._start_send([send_view], dest, sendtag, False)
        self._complete(recv, status)
        self._complete(send, None)

    def Sendrecv_replace(
        self,
        buf: Any,
        dest: int,
        sendtag: int = 0,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        view = message(buf, True).view
        outgoing = memoryview(bytes(view))  # the receive overwrites the buffer being sent
        recv = self._start_recv(view, source, recvtag, False)
        send = self._start_send([outgoing], dest, sendtag, False)
        self._complete(recv, status)
        self._complete(send, None)

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        if source == PROC_NULL:
            if status is not None:
                status._set(PROC_NULL, ANY_TAG, 0)
            return True
        try:
            found = self._engine.probe(self._source(source), self._ctx, self._recv_tag(tag))
        except TransportError as exc:
            raise_mpi(exc)
        if status is not None:
            status._set(self._comm_rank(found[0]), found[1], found[2])
        return True

    def Mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Message:
        return mprobe(self, source, tag, status, blocking=True)

    def Improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Message | None:
        return mprobe(self, source, tag, status, blocking=False)

    mprobe = Mprobe
    improbe = Improbe

    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        if source == PROC_NULL:
            if status is not None:
                status._set(PROC_NULL, ANY_TAG, 0)
            return True
        try:
            found = self._engine.iprobe(self._source(source), self._ctx, self._recv_tag(tag))
        except TransportError as exc:
            raise_mpi(exc)
        if found is None:
            return False
        if status is not None:
            status._set(self._comm_rank(found[0]), found[1], found[2])
        return True
