"""The punch state machine: one selector loop that punches many peers from one local port.

Per peer a list of attempts (one per candidate endpoint), each closed, in flight, or connected; the loop
sleeps in select() until the next socket event, retry time or deadline (no threads, no busy waiting).
How ranks use a punch, and what the kernel does, is told in ``simultaneous_open.py``.
"""

from __future__ import annotations

import errno
import random
import selectors
import socket
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

from .attempts import (
    SILENT,
    Endpoint,
    PunchResult,
    Attempt,
    PeerPunch,
    errname,
    failure_reason,
    normalize,
    success,
)
from .cancel import PunchCancel
from .sockets import bind_reusable, make_listener, tune_connected

K = TypeVar("K", bound=Hashable)

#: Default overall budget of a punch (seconds), used when no deadline is given.
DEFAULT_TIMEOUT = 3.0
#: Delay range (seconds) before re-issuing an attempt that failed with an
#: error (RST, ICMP, 4-tuple busy).  Jittered so that many ranks retrying at
#: once do not move in lockstep.
RETRY_INTERVAL = (0.10, 0.25)
#: An attempt whose SYN got no answer at all for this long is closed and
#: re-issued (fresh SYN) instead of waiting for the kernel's exponential
#: SYN retransmission (1 s, 3 s, 7 s ...).
ATTEMPT_TIMEOUT = 1.0


def deadline_in(seconds: float) -> float:
    """Absolute deadline (``time.monotonic()`` scale) *seconds* from now."""
    return time.monotonic() + seconds


_LISTENER = object()
_CANCEL = object()


class Puncher(Generic[K]):
    """One punch of many peers from one local port: the state machine ``punch_many`` runs (arguments as there)."""

    def __init__(
        self,
        local_addr: tuple[str, int],
        peers: Mapping[K, Sequence[Endpoint]],
        deadline: float | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        listener: socket.socket | None = None,
        listen: bool = True,
        active: bool = True,
        retry_interval: tuple[float, float] = RETRY_INTERVAL,
        attempt_timeout: float = ATTEMPT_TIMEOUT,
        settle: float = 0.0,
        unmatched: list[tuple[socket.socket, Endpoint]] | None = None,
        cancel: PunchCancel | None = None,
        on_result: Callable[[K, PunchResult], None] | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if attempt_timeout <= 0 or not 0 < retry_interval[0] <= retry_interval[1]:
            raise ValueError("attempt_timeout and retry_interval must be positive")
        self.clock = clock
        self.started = clock()
        self.deadline = self.started + timeout if deadline is None else deadline
        self.rng = rng or random.Random()
        self.retry_interval = retry_interval
        self.attempt_timeout = attempt_timeout
        self.settle = settle
        self.active = active
        self.local_ip, self.local_port = local_addr
        self.unmatched = unmatched
        self.cancel = cancel
        self.on_result = on_result
        self.keys = list(peers.keys())
        self.peers: list[PeerPunch] = []
        self.by_endpoint: dict[Endpoint, PeerPunch] = {}
        for key, candidates in peers.items():
            self._add_peer(key, candidates)
        self.reported: dict[int, PunchResult] = {}
        self.sel = selectors.DefaultSelector()
        self.listener, self.own_listener = self._open_listener(listener, listen)
        self.listener_timeout = self.listener.gettimeout() if self.listener is not None else None
        if self.listener is not None:
            self.listener.setblocking(False)
            self.sel.register(self.listener, selectors.EVENT_READ, _LISTENER)
        if cancel is not None:
            self.sel.register(cancel.fileno(), selectors.EVENT_READ, _CANCEL)

    def _add_peer(self, key: Hashable, candidates: Sequence[Endpoint]) -> None:
        p = PeerPunch(key=key)
        seen: set[Endpoint] = set()
        for ep in map(normalize, candidates):
            if ep in seen:
                continue
            seen.add(ep)
            # Small random offset so that N ranks starting together do not
            # all fire their first SYN burst in the same millisecond.
            p.attempts.append(Attempt(peer=p, endpoint=ep, next_try=self.started + self.rng.uniform(0.0, 0.005)))
            self.by_endpoint.setdefault(ep, p)
        self.peers.append(p)

    def _open_listener(self, listener: socket.socket | None, listen: bool) -> tuple[socket.socket | None, socket.socket | None]:
        """The caller's listener, or a temporary one of our own (see ``punch_many``'s ``listen``)."""
        if listener is not None or not listen or self.local_port == 0:
            return listener, None
        try:
            own = make_listener(self.local_ip, self.local_port)
        except OSError:
            # e.g. the port is held by a socket without SO_REUSEPORT: go on
            # without (fine behind NATs, see ``listen`` in punch_many)
            return None, None
        return own, own

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[K, PunchResult]:
        try:
            while self._step():
                pass
        finally:
            self._close()
        return self._results()

    def _step(self) -> bool:
        """Launch and recycle attempts, then sleep until the next event; False when the punch is over."""
        now = self.clock()
        self._apply_cancels()
        pending = [p for p in self.peers if not p.finished and not p.cancelled and p.attempts]
        settling = [p for p in self.peers if p.finished and p.settle_until is not None and now < p.settle_until]
        for p in self.peers:
            if p.finished and p.settle_until is not None and now >= p.settle_until:
                for att in p.attempts:
                    self._close_attempt(att)
                p.settle_until = None
        if now >= self.deadline or (not pending and not settling):
            return False
        wake = self._launch_due(pending + settling, now)
        if self.settle <= 0 and not any(not p.finished and not p.cancelled and p.attempts for p in self.peers):
            return True  # an immediate connect finished the last peer
        for sk, _mask in self.sel.select(timeout=max(0.0, wake - self.clock())):
            now = self.clock()
            if sk.data is _LISTENER:
                self._on_acceptable(now)
            elif sk.data is _CANCEL:
                assert self.cancel is not None
                self.cancel._drain()
            elif isinstance(sk.data, Attempt):
                if sk.data.sock is sk.fileobj:  # not closed meanwhile
                    self._on_writable(sk.data, now)
        return True

    def _apply_cancels(self) -> None:
        if self.cancel is None:
            return
        for p in self.peers:
            if not p.finished and not p.cancelled and self.cancel.cancelled(p.key):
                p.cancelled = True
                for att in p.attempts:
                    self._close_attempt(att)

    def _launch_due(self, peers: list[PeerPunch], now: float) -> float:
        """Start due attempts, recycle silent ones; returns when the loop must wake next."""
        wake = self.deadline
        for p in peers:
            if p.settle_until is not None:
                wake = min(wake, p.settle_until)
            if not self.active:
                continue
            for att in p.attempts:
                if att.connected:
                    continue
                if att.sock is not None and now - att.started >= self.attempt_timeout:
                    self._close_attempt(att)
                    att.note_error(SILENT)
                    att.next_try = now
                if att.sock is None and now >= att.next_try:
                    self._start_attempt(att, now)
                    if p.finished and self.settle <= 0:
                        break
                if att.sock is not None:
                    wake = min(wake, att.started + self.attempt_timeout)
                elif not p.finished or self.settle > 0:
                    wake = min(wake, att.next_try)
        return wake

    # ------------------------------------------------------------------ attempts
    def _retry_later(self, att: Attempt, error: str, now: float) -> None:
        att.note_error(error)
        att.next_try = now + self.rng.uniform(*self.retry_interval)

    def _start_attempt(self, att: Attempt, now: float) -> None:
        att.tries += 1
        att.started = now
        try:
            sock = bind_reusable(self.local_ip, self.local_port)
        except OSError as exc:
            # e.g. EADDRINUSE: something holds the port without SO_REUSEPORT
            self._retry_later(att, f"bind {errname(exc.errno or 0)}", now)
            return
        sock.setblocking(False)
        rc = sock.connect_ex(att.endpoint)
        if rc == 0:
            # Rare for TCP (immediate completion); treat like a writable event.
            att.connected = True
            self._succeed(att.peer, sock, att.endpoint, "connect", now)
            return
        if rc in (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
            att.sock = sock
            self.sel.register(sock, selectors.EVENT_WRITE, att)
            return
        # Immediate failure: EADDRNOTAVAIL (4-tuple in use: an accepted or
        # earlier connection to this endpoint exists), ENETUNREACH (no
        # route), ...  Retry later.
        sock.close()
        self._retry_later(att, errname(rc), now)

    def _on_writable(self, att: Attempt, now: float) -> None:
        sock = att.sock
        assert sock is not None
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err == 0:
            try:
                sock.getpeername()
            except OSError as exc:  # not really connected after all
                err = exc.errno or errno.ENOTCONN
        if err == 0:
            self.sel.unregister(sock)
            att.sock = None
            att.connected = True
            self._succeed(att.peer, sock, att.endpoint, "connect", now)
            return
        self._close_attempt(att)
        self._retry_later(att, errname(err), now)

    def _on_acceptable(self, now: float) -> None:
        assert self.listener is not None
        while True:
            try:
                conn, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. ECONNABORTED; the peer will retry
            ep = normalize(addr)
            p = self.by_endpoint.get(ep)
            if p is None:
                if self.unmatched is not None:
                    self.unmatched.append((tune_connected(conn), ep))
                else:
                    conn.close()
                continue
            # Our own attempt to the same endpoint (if any) cannot succeed
            # now -- the 4-tuple is taken by this connection -- so stop it.
            for att in p.attempts:
                if att.endpoint == ep:
                    self._close_attempt(att)
                    att.connected = True
            self._succeed(p, conn, ep, "accept", now)

    def _close_attempt(self, att: Attempt) -> None:
        if att.sock is not None:
            try:
                self.sel.unregister(att.sock)
            except (KeyError, ValueError):
                pass
            att.sock.close()
            att.sock = None

    # ------------------------------------------------------------------ outcomes
    def _succeed(self, p: PeerPunch, sock: socket.socket, remote: Endpoint, via: str, now: float) -> None:
        tune_connected(sock)
        if p.sock is None:
            p.sock, p.remote, p.via, p.done_at = sock, remote, via, now
            p.settle_until = now + self.settle
        else:
            p.extras.append(sock)
        if self.settle <= 0:
            for other in p.attempts:
                self._close_attempt(other)
            if id(p) not in self.reported:
                self._report(p, success(p, self.started))

    def _report(self, p: PeerPunch, result: PunchResult) -> None:
        self.reported[id(p)] = result
        if self.on_result is not None:
            self.on_result(p.key, result)  # type: ignore[arg-type]

    def _close(self) -> None:
        for p in self.peers:
            for att in p.attempts:
                self._close_attempt(att)
        if self.listener is not None:
            try:
                self.sel.unregister(self.listener)
            except (KeyError, ValueError):
                pass
            if self.own_listener is not None:
                # Take whatever the kernel already accepted for us: closing a
                # listener RSTs its queued connections, which the peer
                # believes are established.
                self._on_acceptable(self.clock())
                self.own_listener.close()
            else:
                self.listener.settimeout(self.listener_timeout)
        self.sel.close()

    def _results(self) -> dict[K, PunchResult]:
        end = self.clock()
        results: dict[K, PunchResult] = {}
        for key, p in zip(self.keys, self.peers, strict=True):
            result = self.reported.get(id(p))
            if result is not None:
                result.extra_socks.extend(s for s in p.extras if s not in result.extra_socks)
            elif p.sock is not None:
                result = success(p, self.started)
                self._report(p, result)
            else:
                errors = {a.endpoint: (a.last_error or "not attempted") for a in p.attempts}
                result = PunchResult(ok=False, sock=None, remote=None, via=None,
                                     reason=failure_reason(key, p, end - self.started, self.active),
                                     elapsed=end - self.started, attempts=sum(a.tries for a in p.attempts), errors=errors)
                self._report(p, result)
            results[key] = result
        return results
