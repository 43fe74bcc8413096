"""One pipelined DSO connection to one relay node (what ``DsoClient`` keeps per node).

Every call carries a request id, so calls can be pipelined (``start``
returns a ``Pending``) and made from several threads. The thread that waits
for a reply reads the socket itself (no reader thread, no hop); other
waiting threads take over when it is done. A reply that comes after its
caller gave up is dropped.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from typing import Any, Callable

from ..rendezvous.relay_connection import Aborted, RelayConnection, RelayError
from ..util.byteparts import sendmsg_all
from ..wire.frame_reader import FrameReader
from ..wire.relay_protocol import (
    MAX_SERVER_FRAME,
    Kind,
    ProtocolError,
    decode_body,
    decode_dso,
    dso_head,
)

# A reply may carry a value as large as the relay allows (64 MiB by default) plus its JSON.
MAX_REPLY_FRAME = max(MAX_SERVER_FRAME, (1 << 30) + (1 << 20))


class SharedObjectError(RelayError):
    """A shared-object call failed: refused by the relay (`code` says why), or the relay is gone."""

    def __init__(self, message: str, code: str = "error", relay: str | None = None) -> None:
        super().__init__(message if relay is None else f"{message} (relay {relay})", code)
        self.relay = relay


class SharedObjectTimeout(SharedObjectError):
    def __init__(self, message: str, relay: str | None = None) -> None:
        super().__init__(message, "timeout", relay)


class Pending:
    """A call in flight; ``result()`` waits for it."""

    __slots__ = ("node", "request", "done", "meta", "payload", "error", "deadline", "convert")

    def __init__(self, node: "NodeConnection", deadline: float | None, convert: Callable[[dict, memoryview], Any] | None) -> None:
        self.node = node
        self.request = 0
        self.done = False
        self.meta: dict[str, Any] = {}
        self.payload: memoryview | None = None
        self.error: BaseException | None = None
        self.deadline = deadline
        self.convert = convert

    def result(self, timeout: float | None = None) -> Any:
        deadline = self.deadline
        if timeout is not None:
            deadline = time.monotonic() + timeout if deadline is None else min(deadline, time.monotonic() + timeout)
        self.node.wait(self, deadline)
        if self.error is not None:
            raise self.error
        if self.convert is not None:
            return self.convert(self.meta, self.payload)
        return self.meta, self.payload


class NodeConnection:
    """One DSO connection to one relay node."""

    def __init__(self, host: str, port: int, job: str, token: str, timeout: float, scheme: str = "tcp") -> None:
        self.url = f"{scheme}://{host}:{port}"
        conn = RelayConnection(self.url, timeout=timeout)
        try:
            conn.send(Kind.DSO_ATTACH, {"job": job, "token": token})
            kind, body = conn.recv(timeout)
        except socket.timeout:
            conn.close()
            raise SharedObjectError("the relay did not answer DSO_ATTACH in time", "timeout", self.url) from None
        except RelayError as exc:
            conn.close()
            raise SharedObjectError(str(exc), exc.code, self.url) from None
        if kind is not Kind.DSO_ATTACHED:
            conn.close()
            raise SharedObjectError(f"relay sent {kind.name} where DSO_ATTACHED was expected", "protocol", self.url)
        self.limits = body
        self.sock = conn.sock
        self.sock.settimeout(None)  # blocking sends; reads wait in poll() with their own deadline
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)
        self._send_lock = threading.Lock()
        # Over TLS (tls://): OpenSSL must not read and write one connection from two threads at once,
        # and poll() cannot see bytes OpenSSL already decrypted (``pending()``).
        self._tls_lock = threading.Lock() if isinstance(self.sock, ssl.SSLSocket) else None
        self._cv = threading.Condition()
        self._reading = False
        self._idle = 0  # threads waiting on _cv
        self._next = 1
        self._calls: dict[int, Pending] = {}
        self.dead: SharedObjectError | None = None
        # receive state, kept across reads that time out mid-frame
        self._reader = FrameReader(MAX_REPLY_FRAME)  # kept across reads that time out mid-frame
        self._reader.feed(conn.take_buffer())  # (empty: the relay sends nothing before a call)

    # ---------------------------------------------------------------- sending
    def start(self, meta: dict[str, Any], payload: Any, deadline: float | None, convert=None) -> Pending:
        pending = Pending(self, deadline, convert)
        view = memoryview(payload).cast("B") if payload is not None and len(payload) else None
        with self._send_lock:
            if self.dead is not None:
                raise self.dead
            pending.request = self._next
            self._next = self._next + 1 if self._next < 0xFFFFFFFF else 1
            self._calls[pending.request] = pending
            head = dso_head(Kind.DSO_CALL, pending.request, meta, 0 if view is None else len(view))
            try:
                self._sendall([head] if view is None else [head, view])
            except OSError as exc:
                self._die(SharedObjectError(f"lost the connection: {exc}", "lost", self.url))
                raise self.dead from None
        return pending

    def _sendall(self, parts: list) -> None:
        if self._tls_lock is not None:  # an SSLSocket has no sendmsg
            with self._tls_lock:
                for part in parts:
                    self.sock.sendall(part)
            return
        sendmsg_all(self.sock, [memoryview(p) for p in parts])

    # ---------------------------------------------------------------- waiting
    def wait(self, pending: Pending, deadline: float | None) -> None:
        while not pending.done:
            with self._cv:
                self._idle += 1
                try:
                    while not pending.done and self._reading:
                        if not self._cv.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
                            if deadline is not None and time.monotonic() >= deadline:
                                self._timed_out(pending)
                finally:
                    self._idle -= 1
                if pending.done:
                    return
                self._reading = True
            try:
                while not pending.done:
                    self._read_frame(deadline, pending)
            finally:
                with self._cv:
                    self._reading = False
                    if self._idle:
                        self._cv.notify_all()

    def _timed_out(self, pending: Pending) -> None:
        self._calls.pop(pending.request, None)
        pending.error = SharedObjectTimeout("no answer from the relay in time", self.url)
        pending.done = True

    def _read_frame(self, deadline: float | None, pending: Pending) -> None:
        """Read until one whole frame is in, and act on it (or until `pending` is done: timed out)."""
        try:
            while (frame := self._reader.next()) is None:
                self._recv_wait(deadline, pending)
                if pending.done:
                    return
                with self._reader.buffer() as room:  # (a large reply's body is read straight into its buffer)
                    n = self._recv_into(room)
                if not n:
                    raise ConnectionError("the relay closed the connection")
                self._reader.advance(n)
        except (OSError, ProtocolError) as exc:
            self._die(SharedObjectError(f"lost the connection: {exc}", "lost", self.url))
            return
        self._dispatch(*frame)

    def _recv_into(self, room: memoryview) -> int:
        """recv_into; over TLS, under the lock that keeps OpenSSL to one thread."""
        if self._tls_lock is None:
            return self.sock.recv_into(room)
        with self._tls_lock:
            return self.sock.recv_into(room)

    def _recv_wait(self, deadline: float | None, pending: Pending) -> None:
        if self._tls_lock is not None and self.sock.pending():
            return
        while True:
            ms = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000 + 0.999))
            if self._poll.poll(ms):
                return
            if deadline is not None and time.monotonic() >= deadline:
                self._timed_out(pending)
                return

    def _dispatch(self, kind: Kind, body: bytearray) -> None:
        if kind is Kind.DSO_REPLY:
            try:
                request, meta, value = decode_dso(body)
            except ProtocolError as exc:
                self._die(SharedObjectError(f"bad reply: {exc}", "protocol", self.url))
                return
            pending = self._calls.pop(request, None)
            if pending is None:
                return  # its caller gave up waiting
            if "error" in meta:
                code = str(meta.get("error"))
                cls = SharedObjectTimeout if code == "timeout" else SharedObjectError
                pending.error = cls(str(meta.get("message", code)), self.url) if cls is SharedObjectTimeout else cls(
                    str(meta.get("message", code)), code, self.url)
            else:
                pending.meta, pending.payload = meta, value
            pending.done = True
            if self._idle:
                with self._cv:
                    self._cv.notify_all()
            return
        try:
            msg = decode_body(kind, bytes(body))
        except ProtocolError as exc:
            msg = {"code": "protocol", "message": str(exc)}
        if kind is Kind.ABORT:
            self._die(SharedObjectError(str(Aborted.from_body(msg)), "aborted", self.url))
        elif kind is Kind.ERROR:
            self._die(SharedObjectError(str(msg.get("message", "relay error")), str(msg.get("code", "error")), self.url))
        else:
            self._die(SharedObjectError(f"unexpected {kind.name} frame on a DSO connection", "protocol", self.url))

    def fail(self, error: SharedObjectError) -> None:
        """Declare the connection lost (if it is not already): calls in flight and later ones fail with `error`."""
        self._die(error)

    def _die(self, error: SharedObjectError) -> None:
        if self.dead is None:
            self.dead = error
        calls, self._calls = self._calls, {}
        for pending in calls.values():
            pending.error = self.dead
            pending.done = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self._cv:
            self._cv.notify_all()

    def close(self) -> None:
        if self.dead is None:
            self.dead = SharedObjectError("the client was closed", "closed", self.url)
        self.sock.close()
