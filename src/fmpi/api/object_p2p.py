"""The lowercase point-to-point calls of ``Comm`` (mixed into it): any Python object, pickled
(``wire.pickle_oob``: large buffers inside the object travel out of band, uncopied).

They need ``Comm``'s transport helpers: ``_send_now``, ``_start_send``, ``_recv_now``,
``_start_recv``, ``_complete``, and its ``Probe``/``Iprobe``.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..wire import pickle_oob as serialize
from .constants import ANY_SOURCE, ANY_TAG
from .request import Request
from .status import Status


class ObjectP2P:
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
        if buf is not None:  # mpi4py 4 ignores it too, and says so
            warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=2)
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
