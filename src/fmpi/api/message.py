"""Matched probe: ``Comm.Mprobe/Improbe/mprobe/improbe`` and ``MPI.Message``.

A matched probe takes the message it finds off the matching queue, so no other
receive can match it: here it finds the message (``engine.probe``) and at once
posts a receive for exactly that source and tag without a buffer. The transport
keeps messages from one source in order, so that receive matches the message
the probe saw, which is already there: it completes without waiting. The
payload is then held by the ``Message`` until ``Recv``/``Irecv`` copies it into
the user's buffer (or unpickles it, for ``recv``/``irecv``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..transport.requests import TransportError
from ..wire import pickle_oob as serialize
from . import exceptions as err
from .buffers import receive_target
from .constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from .handles import Handled
from .request import Request
from .status import Status

if TYPE_CHECKING:
    from .comm import Comm


class Message(Handled):
    """A message taken by a matched probe, waiting to be received."""

    # `_handle`: the message this is a handle on (itself for an original): what equality and the
    # integer handle (handles.py) go by.
    __slots__ = ("_handle", "_name", "_payload", "_source", "_tag", "__weakref__")

    def __init__(self, message: Message | None = None) -> None:
        """``Message()``: a null handle (== MESSAGE_NULL); ``Message(msg)``: another handle on `msg`."""
        if message is not None and not isinstance(message, Message):
            raise TypeError(f"expecting an MPI.Message, not {type(message).__name__}")
        source = message if message is not None else MESSAGE_NULL
        self._payload, self._source, self._tag = source._payload, source._source, source._tag
        self._handle: object = source._handle if message is not None else self
        self._name = ""

    @classmethod
    def _of(cls, payload: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, name: str = "") -> Message:
        """A message a probe took (`payload`: its bytes), or a predefined one (`name`)."""
        message = cls.__new__(cls)
        message._handle, message._payload, message._source, message._tag, message._name = message, payload, source, tag, name
        return message

    def __bool__(self) -> bool:
        return self._payload is not None

    def __eq__(self, other: object) -> bool:
        """As mpi4py's handles: the same message, or both null (MESSAGE_NULL, or received)."""
        if not isinstance(other, Message):
            return NotImplemented
        if other._handle is self._handle or (not self and not other):
            return True
        return bool(self) and bool(other) and self._source == other._source == PROC_NULL  # both MESSAGE_NO_PROC

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def _referent(self) -> object:
        return self._handle

    def free(self) -> None:
        """
        Drop the message unreceived (mpi4py's ``Message.free``): the handle becomes MESSAGE_NULL.

        The predefined MESSAGE_NULL and MESSAGE_NO_PROC stay themselves, as in mpi4py."""
        if not self._name:
            self._payload = None

    def __reduce__(self) -> str | tuple:
        """
        Pickle the predefined messages by name (another handle on one, as another handle, of its class).

        A matched message is this process's, so it cannot be pickled, as in mpi4py."""
        if self._name:
            return self._name
        for predefined in (MESSAGE_NULL, MESSAGE_NO_PROC):
            if self == predefined:
                return (type(self), (predefined,))
        raise ValueError("cannot pickle a matched message")

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Message {self._name or f'from {self._source} tag {self._tag}'}>"

    def _take(self, status: Status | None) -> tuple[Any, int, int]:
        if self._payload is None:
            raise err.Exception(err.ERR_REQUEST, "invalid message (MESSAGE_NULL, or already received)")
        payload, source, tag = self._payload, self._source, self._tag
        if self._name != "MESSAGE_NO_PROC":  # MESSAGE_NO_PROC receives nothing, any number of times
            self._payload = None
        if status is not None:
            status._set(source, tag, len(payload))
        return payload, source, tag

    # ------------------------------------------------------------ buffers
    def Recv(self, buf: Any, status: Status | None = None) -> None:
        """
        Receive the matched message into a buffer; the handle becomes MESSAGE_NULL."""
        payload, _, _ = self._take(status)
        view, unpack = receive_target(buf) if buf is not None else (memoryview(bytearray()), None)
        if len(payload) > len(view):
            raise err.Exception(err.ERR_TRUNCATE, f"message of {len(payload)} bytes truncated to {len(view)}")
        view[: len(payload)] = payload
        if unpack is not None:
            unpack(len(payload))

    def Irecv(self, buf: Any) -> Request:
        """
        Receive the matched message into a buffer and return a Request, already complete."""
        status = Status()
        self.Recv(buf, status)
        return Request.completed(None, status.Get_source(), status.Get_tag(), status.Get_count())

    # ------------------------------------------------------------ objects
    def recv(self, status: Status | None = None) -> Any:
        """
        Receive the matched message and return the Python object it carries."""
        payload, source, _ = self._take(status)
        return None if source == PROC_NULL else serialize.loads(payload)

    def irecv(self) -> Request:
        """
        Receive the matched message and return a Request, already complete, whose wait returns the object."""
        status = Status()
        value = self.recv(status)
        return Request.completed(value, status.Get_source(), status.Get_tag(), status.Get_count())

    # ------------------------------------------------------- probes (classmethods, as mpi4py)
    @classmethod
    def Probe(cls, comm: Comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Message:
        """
        Wait for a message from `source` with `tag` on `comm` and return it matched (as Comm.Mprobe)."""
        return mprobe(comm, source, tag, status, blocking=True)

    @classmethod
    def Iprobe(cls, comm: Comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Message | None:
        """
        Return a matched message from `source` with `tag` on `comm` if there is one now, else None."""
        return mprobe(comm, source, tag, status, blocking=False)

    probe = Probe
    iprobe = Iprobe


MESSAGE_NULL = Message._of(None, name="MESSAGE_NULL")
MESSAGE_NO_PROC = Message._of(b"", PROC_NULL, ANY_TAG, "MESSAGE_NO_PROC")


def mprobe(comm: Comm, source: int, tag: int, status: Status | None, blocking: bool) -> Message | None:
    """Find a message and take it off the queue (see the module docstring); None if `blocking` is
    False and there is none yet."""
    if source == PROC_NULL:
        if status is not None:
            status._set(PROC_NULL, ANY_TAG, 0)
        return Message._of(b"", PROC_NULL, ANY_TAG)  # (a handle of its own: receiving it makes it MESSAGE_NULL)
    world, tag = comm._recv_envelope(source, tag)
    engine = comm._engine
    try:
        found = engine.probe(world, comm._ctx, tag) if blocking else engine.iprobe(world, comm._ctx, tag)
        if found is None:
            return None
        op = engine.irecv(found[0], comm._ctx, found[1], None)
        if not op.done:
            engine.wait(op)
    except TransportError as exc:
        comm._transport_failed(exc)
    if op.error is not None:
        comm._transport_failed(op.error)
    payload = bytes(op.payload) if op.payload is not None else b""
    source = comm._comm_rank(op.status_source)
    if status is not None:
        status._set(source, op.status_tag, len(payload))
    return Message._of(payload, source, op.status_tag)
