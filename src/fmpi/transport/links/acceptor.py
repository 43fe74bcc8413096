"""The listener's side of link set-up: the acceptor's handshake of every accepted connection, on the progress thread.

Why not a set-up thread per connection: a connection that says nothing (a
port scan, a stranger holding connections open) held a thread of the set-up
pool for the whole handshake timeout; 40 of them took the pool and delayed a
rank's first exchange from 0.06 s to 8.9 s. Here a pending connection costs
its socket and a few bytes: its reads are driven by the progress loop's
epoll, and what it is sent is a few dozen bytes, for which a fresh socket
always has room. At most ``max_pending`` connections are in their handshake
at once (one more closes the oldest), each for the handshake timeout at most.

A HELLO claiming a real rank marks nothing: the verdict is asked for only
once CONFIRM proved the connector a member of the job (``handshake.py``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Callable

from ...util.notices import RepeatedNotice
from ..core import Core
from ..progress import READ
from .handshake import CONFIRM, HELLO, Acceptance, HandshakeError, Verdict, check_hello, wrong_rank_answer

MAX_PENDING = 256


@dataclass(eq=False)
class _Pending:
    """An accepted connection in its handshake: the bytes of the message it is sending us."""

    sock: socket.socket
    origin: str
    need: int = HELLO.size
    got: bytearray = field(default_factory=bytearray)
    acceptance: Acceptance | None = None  # (after its HELLO)


class Acceptor:
    """Runs the acceptor's half for accepted connections (progress thread only).

    `verdict_for(src)`: the verdict on an authenticated connection from rank
    `src` (ACCEPT marks the pair); `install(src, sock, channel, lane)`: an
    accepted link; `abandoned(src)`: an accepted one broke before it was
    installed (unmark the pair).
    """

    def __init__(
        self,
        core: Core,
        secret: bytes,
        host_key: bytes,
        verdict_for: Callable[[int], Verdict],
        install: Callable[[int, socket.socket, str, str], None],
        abandoned: Callable[[int], None],
    ) -> None:
        self._core = core
        self._secret = secret
        self._host_key = host_key
        self._verdict_for = verdict_for
        self._install = install
        self._abandoned = abandoned
        self._max_pending = MAX_PENDING
        self._pending: dict[socket.socket, _Pending] = {}  # (in arrival order: the first is the oldest)
        self._refusals = RepeatedNotice(f"fmpi: rank {core.rank}: refused a connection")

    def add(self, sock: socket.socket) -> None:
        """A connection our listener accepted: start its handshake."""
        try:
            origin = "{}:{}".format(*sock.getpeername()[:2])
            sock.setblocking(False)
        except OSError:
            sock.close()
            return
        if len(self._pending) >= self._max_pending:
            oldest = next(iter(self._pending.values()))
            self._end(oldest, f"more than {self._max_pending} connections in their handshake at once; closed the oldest")
        pending = self._pending[sock] = _Pending(sock, origin)
        self._core.loop.register(sock, READ, lambda _mask: self._readable(pending))
        timeout = self._core.options.connect_timeout
        self._core.loop.call_later(timeout, lambda: self._overdue(pending, timeout))

    def _readable(self, pending: _Pending) -> None:
        try:
            data = pending.sock.recv(pending.need - len(pending.got))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._end(pending, str(exc))
            return
        if not data:
            # A connection closed before saying anything is the loser of a race
            # (its side was linked meanwhile), or a port scan: not news.
            self._end(pending, "peer closed the connection during the handshake" if pending.got else None)
            return
        pending.got += data
        if len(pending.got) < pending.need:
            return
        raw, pending.got = bytes(pending.got), bytearray()
        try:
            if pending.acceptance is None:
                self._hello(pending, raw)
            else:
                self._confirm(pending, raw)
        except (HandshakeError, OSError) as exc:
            self._end(pending, None if "impossible" in str(exc) else str(exc))

    def _hello(self, pending: _Pending, raw: bytes) -> None:
        answer = wrong_rank_answer(raw, self._core.rank)
        if answer:
            _send(pending.sock, answer)
        hello = check_hello(raw, self._core.rank)
        if not 0 <= hello.src < self._core.size or hello.src == self._core.rank:
            raise HandshakeError(f"connection claims impossible rank {hello.src}")
        pending.acceptance = Acceptance(self._secret, self._core.rank, hello, self._host_key)
        _send(pending.sock, pending.acceptance.challenge)
        pending.need = CONFIRM.size

    def _confirm(self, pending: _Pending, raw: bytes) -> None:
        acceptance = pending.acceptance
        assert acceptance is not None
        channel = acceptance.confirmed(raw)  # (raises unless the connector proved itself)
        src = acceptance.hello.src
        verdict = self._verdict_for(src)
        self._forget(pending)
        try:
            _send(pending.sock, acceptance.verdict(verdict))
        except OSError:
            pending.sock.close()
            if verdict is Verdict.ACCEPT:
                self._abandoned(src)
            raise
        if verdict is Verdict.ACCEPT:
            self._install(src, pending.sock, channel, acceptance.lane())
        else:
            pending.sock.close()

    def _overdue(self, pending: _Pending, timeout: float) -> None:
        if pending.sock in self._pending:
            self._end(pending, f"no handshake within {timeout:g} s")

    def _forget(self, pending: _Pending) -> None:
        if self._pending.pop(pending.sock, None) is not None:
            self._core.loop.unregister(pending.sock)

    def _end(self, pending: _Pending, why: str | None) -> None:
        """Close a connection that will not become a link (`why`: the refusal to report; None: not news)."""
        self._forget(pending)
        pending.sock.close()
        if why is not None:
            self._refusals.say(f"{why} (from {pending.origin})")


def _send(sock: socket.socket, data: bytes) -> None:
    """A handshake message, all at once (a few dozen bytes: a socket that cannot take them is broken)."""
    if sock.send(data) != len(data):
        raise OSError(f"the connection took only part of a {len(data)}-byte handshake message")
