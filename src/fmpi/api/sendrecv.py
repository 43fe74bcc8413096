"""``Comm.Isendrecv`` and ``Isendrecv_replace`` (MPI 4.0): a send and a receive started together,
one request for both.

The request's op is the engine's own (``new_op``): a helper thread waits for the receive and the
send, then completes it with the first error of the two, so ``Wait``/``Test``/``Waitall``/
``Waitany`` see it as any other request. Its status is the receive's.
"""

from __future__ import annotations

import threading
from typing import Any

from ..transport.requests import Op
from .buffers import message, receive_target
from .constants import ANY_SOURCE, ANY_TAG
from .request import Request
from .status import Status


class NonblockingSendrecv:
    """Mixed into ``Comm``: uses its ``_start_recv``/``_start_send``."""

    def Isendrecv(
        self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
        source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
    ) -> Request:
        # Both specs first: a bad send buffer must not leave a receive posted behind it.
        (recv_view, unpack), send_view = receive_target(recvbuf), message(sendbuf, False).view
        recv = self._start_recv(recv_view, source, recvtag, False, unpack)  # type: ignore[attr-defined]
        return _both(recv, self._start_send([send_view], dest, sendtag, False))  # type: ignore[attr-defined]

    def Isendrecv_replace(
        self, buf: Any, dest: int, sendtag: int = 0, source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
    ) -> Request:
        outgoing = memoryview(bytes(message(buf, False).view))  # the receive overwrites the buffer being sent
        view, unpack = receive_target(buf)
        recv = self._start_recv(view, source, recvtag, False, unpack)  # type: ignore[attr-defined]
        return _both(recv, self._start_send([outgoing], dest, sendtag, False))  # type: ignore[attr-defined]


def _both(recv: Request, send: Request) -> Request:
    """One request completing when `recv` and `send` both have, with `recv`'s status."""
    engine = recv._engine or send._engine
    if engine is None:  # both with PROC_NULL: already complete
        return recv
    op = engine.new_op()

    def watch() -> None:
        recv._wait_op()
        send._wait_op()
        errors = [r._op.error for r in (recv, send) if r._op is not None and r._op.error is not None]
        engine.finish_op(op, errors[0] if errors else None)

    def finish(_: Op) -> tuple[Any, int, int, int]:
        status = Status()
        value = recv._settle(status)
        send._settle(None)
        return value, status.source, status.tag, status._nbytes

    threading.Thread(target=watch, name="fmpi-isendrecv", daemon=True).start()
    return Request(engine, op, finish)


__all__ = ["NonblockingSendrecv"]
