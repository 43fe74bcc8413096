"""TCP simultaneous open ("hole punching") between fmpi ranks.

How ranks use it
----------------
1. A rank binds one local port with :func:`bind_reusable` and connects to the
   relay from it.  The relay reports the address it saw: the rank's public
   endpoint.  Behind a port-preserving NAT (AWS Lambda) the public port
   equals the local port.
2. The rank should also keep a listener on the same port
   (:func:`make_listener`, same SO_REUSEADDR + SO_REUSEPORT options) and
   pass it to :func:`punch_many`; otherwise punch_many opens a temporary one.
   Directly reachable peers (public, same LAN) need it, see below.
3. Ranks exchange candidate endpoints through the relay (e.g. the LAN
   address and the public address) and call :func:`punch_many` at roughly
   the same time.  Every side connect()s from the shared local port to each
   candidate of each peer.  Behind NATs that drop unsolicited SYNs, the
   first side's SYN dies at the other side's NAT but opens a mapping in its
   own NAT; the second side's SYN then matches that mapping, is let in, and
   meets a socket in SYN_SENT: the kernel completes a TCP simultaneous open
   (SYN_SENT -> SYN_RECV -> ESTABLISHED on both ends).  One TCP connection,
   seen from both sides.  Since every rank uses one port, two ranks share
   at most one connection per (address, address) pair.

What Linux does (measured in the namespace NAT lab, kernel 6.x):

* Sockets may share a local ip:port if all set SO_REUSEADDR *and*
  SO_REUSEPORT (SO_REUSEADDR alone: EADDRINUSE next to a listener).  All
  must belong to the same uid.
* connect() to a 4-tuple that a live socket already uses (a pending
  attempt, or an established/accepted connection, even one still waiting
  in a listener's accept queue) fails *immediately* with EADDRNOTAVAIL.  So
  an attempt cannot be re-issued while the previous one to the same
  endpoint is alive: close it first (closing a SYN_SENT socket sends
  nothing and leaves no TIME_WAIT, so the 4-tuple is free at once).  A
  4-tuple in TIME_WAIT, however, is reused by an explicitly bound socket
  (TCP timestamps on), so re-punching a pair after a close works.
* A host with no socket for the SYN answers RST: ECONNREFUSED within one
  RTT.  Normal while a public peer has not started yet, so refused
  attempts are retried after 100-250 ms (jittered).  But an attempt killed
  by RST is gone: two public peers without listeners keep refusing each
  other (they only connect if their attempts overlap within one RTT: 0 of
  6 runs in the lab), hence the listener.  For the same reason a NAT that
  answers unsolicited SYNs with RST instead of dropping them defeats
  punching completely (lab: cone<->cone with a RSTing gateway fails).
* An incoming SYN is matched against a socket in SYN_SENT for the exact
  4-tuple before any listener, so if both sides are punching the result is
  a simultaneous open on the connecting sockets; only if the local side has
  no attempt to that endpoint (yet) does the listener get it.
* ICMP unreachable in SYN_SENT aborts the attempt (ENETUNREACH /
  EHOSTUNREACH), e.g. for a peer's private address routed nowhere; routers
  rate-limit these ICMPs, so later attempts simply go unanswered.
* A SYN dropped silently by a NAT leaves the attempt in SYN_SENT; the kernel
  would retransmit after 1 s, 3 s, 7 s, ...  We re-issue a silent attempt
  ourselves every ``attempt_timeout`` (default 1 s) so SYNs keep flowing at
  a steady pace until the deadline.

The functions use only the standard library, run one selector loop (no
threads, no busy waiting: the loop sleeps in select() until the next socket
event, retry time or deadline) and punch all peers in parallel.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import random
import selectors
import socket
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = [
    "ATTEMPT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "RETRY_INTERVAL",
    "Endpoint",
    "PunchCancel",
    "PunchResult",
    "bind_reusable",
    "deadline_in",
    "make_listener",
    "punch",
    "punch_many",
]

Endpoint = tuple[str, int]
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


def _family(ip: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET


def bind_reusable(local_ip: str, port: int) -> socket.socket:
    """A TCP socket bound to ``local_ip:port`` that may share that port.

    Sets SO_REUSEADDR and SO_REUSEPORT before bind(), which lets the relay
    connection, a listener and any number of punch attempts (each towards a
    different remote endpoint) all use the same local port -- the one whose
    public mapping the relay observed.  Every socket sharing the port must
    be created this way (and by the same uid).  ``port=0`` picks a free port
    (read it back with ``getsockname()``).  Use ``local_ip="0.0.0.0"`` unless
    you need a specific interface; all sharers should use the same ip.
    """
    sock = socket.socket(_family(local_ip), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((local_ip, port))
    except BaseException:
        sock.close()
        raise
    return sock


def make_listener(local_ip: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening socket on a shared port (see :func:`bind_reusable`).

    Pass it to :func:`punch_many` (``listener=``) so that peers which reach
    this port while we have no attempt towards them get accepted and
    matched to their key.  Keep accepting on it yourself afterwards: peers
    that connect later (or duplicates) queue up on it.
    """
    sock = bind_reusable(local_ip, port)
    try:
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class PunchResult:
    """Outcome of punching one peer.

    ``ok``: a connected socket is in ``sock`` (blocking mode, TCP_NODELAY on);
    the caller owns it (and any ``extra_socks``).  ``remote`` is the peer
    endpoint it is connected to and ``via`` says whether our connect()
    completed (``"connect"``, includes simultaneous open) or the listener
    accepted it (``"accept"``).  Otherwise ``reason`` explains the failure
    and ``errors`` holds the last error per candidate endpoint.
    ``elapsed`` is seconds from the start of the punch to success/failure.
    """

    ok: bool
    sock: socket.socket | None
    remote: Endpoint | None
    via: str | None
    reason: str
    elapsed: float
    attempts: int
    errors: dict[Endpoint, str] = field(default_factory=dict)
    #: other connections to the same peer established before we returned
    #: (another candidate path, or the listener accepted one too).  The
    #: transport's handshake decides which one survives; close the rest.
    extra_socks: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        """Close every socket held by this result."""
        for s in ([self.sock] if self.sock else []) + self.extra_socks:
            try:
                s.close()
            except OSError:
                pass
        self.sock = None
        self.extra_socks = []


# ---------------------------------------------------------------------------
# internal state
# ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Attempt:
    peer: _Peer
    endpoint: Endpoint
    sock: socket.socket | None = None
    started: float = 0.0
    next_try: float = 0.0
    tries: int = 0
    last_error: str | None = None
    connected: bool = False   # this endpoint gave us a connection: stop
    error_counts: dict[str, int] = field(default_factory=dict)

    def note_error(self, what: str) -> None:
        self.last_error = what
        self.error_counts[what] = self.error_counts.get(what, 0) + 1


@dataclass(eq=False)
class _Peer:
    key: Hashable
    attempts: list[_Attempt] = field(default_factory=list)
    sock: socket.socket | None = None
    remote: Endpoint | None = None
    via: str | None = None
    done_at: float | None = None        # first success time
    settle_until: float | None = None   # keep other attempts until then
    extras: list[socket.socket] = field(default_factory=list)
    cancelled: bool = False

    @property
    def finished(self) -> bool:
        return self.sock is not None


_LISTENER = object()
_CANCEL = object()


class PunchCancel:
    """Stops peers of a running :func:`punch_many` from another thread.

    The transport punches a batch of peers in one call; when one of them is
    linked some other way meanwhile (the peer's own connection reached our
    listener, or the pair moved to the relay), ``cancel(key)`` closes that
    peer's attempts at once instead of letting them run to the deadline.
    ``cancel()`` without a key stops the whole call.  A pipe wakes the
    punch loop, so cancelling costs no polling.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: set[Hashable] = set()
        self._all = False
        self._closed = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def cancel(self, key: Hashable | None = None) -> None:
        with self._lock:
            if self._closed:
                return
            if key is None:
                self._all = True
            else:
                self._keys.add(key)
            try:
                os.write(self._w, b"x")
            except BlockingIOError:
                pass  # a wake-up is pending anyway

    def cancelled(self, key: Hashable) -> bool:
        with self._lock:
            return self._all or key in self._keys

    def fileno(self) -> int:
        return self._r

    def _drain(self) -> None:
        try:
            while os.read(self._r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._r)
            os.close(self._w)

# Pseudo error of an attempt that got no answer within attempt_timeout.
# Every error is retried (the peer may start punching at any moment); the
# errno names only feed the failure reason.
_SILENT = "no answer (SYN dropped or unanswered)"


def _errname(code: int) -> str:
    return errno.errorcode.get(code, str(code))


def _normalize(endpoint: Sequence[object]) -> Endpoint:
    ip, port = endpoint[0], endpoint[1]
    return (str(ip), int(port))  # type: ignore[call-overload]


def _tune_connected(sock: socket.socket) -> socket.socket:
    sock.setblocking(True)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def punch_many(
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
) -> dict[K, PunchResult]:
    """Punch TCP connections to many peers at once from one local port.

    ``local_addr``: ``(ip, port)`` to bind every attempt to -- the port the
    relay connection uses (``"0.0.0.0"`` is fine as ip).
    ``peers``: key -> candidate endpoints, in preference order (e.g. LAN
    address first, then the public address the relay observed).  Duplicate
    candidates are ignored.  All candidates of all peers are attempted
    concurrently in a single selector loop.
    ``deadline``: absolute ``time.monotonic()`` time; if ``None``, ``timeout``
    seconds from now.  Peers not connected by then fail.

    ``listener``: optional listening socket on the same port (see
    :func:`make_listener`).  Connections it accepts whose source endpoint is
    a candidate of a pending peer complete that peer (``via="accept"``);
    needed when the other side connects while we have no attempt to its
    exact endpoint (we are public / on its LAN).  Accepted connections from
    unknown endpoints go to ``unmatched`` (if given) or are closed.
    ``listen``: if no ``listener`` is passed, open a temporary one on the
    shared port for the duration of the call (drained before it is closed).
    Without any listener two directly reachable peers (public/public, same
    LAN) answer each other's SYNs with RST unless their attempts overlap
    within one RTT, so they practically never connect (0 of 6 in the lab);
    behind SYN-dropping NATs it makes no difference.  Skipped for port 0.
    Prefer passing a long-lived listener and keep accepting on it
    afterwards: a peer whose SYN the kernel accepted just as a temporary
    listener closes gets a RST.
    ``active=False`` only accepts (sends no SYN) -- for a public rank that
    wants to be called.

    Retrying: a failed attempt (RST, ICMP unreachable, 4-tuple still busy)
    is re-issued after a jittered ``retry_interval``; an attempt that got no
    answer for ``attempt_timeout`` is closed and re-issued.

    ``cancel``: a :class:`PunchCancel` another thread may use to stop some
    peers (or all) early; they fail with a reason saying so.

    ``on_result(key, result)``: called for every peer as soon as its outcome
    is known -- a connection the moment it is made (with ``settle=0``), a
    failure at the end -- so that a batch of punches does not hold back a
    finished peer until the slowest one is done (its partner may be waiting
    for our handshake).  The returned dict holds the same results.

    ``settle``: after a peer's first connection, keep its other candidate
    attempts running this many seconds and return whatever else connects in
    ``extra_socks`` (default 0: stop at the first connection).

    Returns a :class:`PunchResult` for every key.  The caller owns the
    returned sockets.  Both sides may get a connection through different
    routes; the transport's handshake must pick one deterministically.
    """
    if attempt_timeout <= 0 or not 0 < retry_interval[0] <= retry_interval[1]:
        raise ValueError("attempt_timeout and retry_interval must be positive")
    now0 = clock()
    if deadline is None:
        deadline = now0 + timeout
    rng = rng or random.Random()
    lo, hi = retry_interval
    local_ip, local_port = local_addr

    peer_states: list[_Peer] = []
    by_endpoint: dict[Endpoint, _Peer] = {}
    for key, cands in peers.items():
        p = _Peer(key=key)
        seen: set[Endpoint] = set()
        for ep in cands:
            ep = _normalize(ep)
            if ep in seen:
                continue
            seen.add(ep)
            # Small random offset so that N ranks starting together do not
            # all fire their first SYN burst in the same millisecond.
            p.attempts.append(_Attempt(peer=p, endpoint=ep,
                                       next_try=now0 + rng.uniform(0.0, 0.005)))
            by_endpoint.setdefault(ep, p)
        peer_states.append(p)

    sel = selectors.DefaultSelector()
    own_listener: socket.socket | None = None
    if listener is None and listen and local_port != 0:
        try:
            own_listener = listener = make_listener(local_ip, local_port)
        except OSError:
            # e.g. the port is held by a socket without SO_REUSEPORT: go on
            # without (fine behind NATs, see ``listen`` above)
            own_listener = None
    listener_timeout: float | None = None
    if listener is not None:
        listener_timeout = listener.gettimeout()
        listener.setblocking(False)
        sel.register(listener, selectors.EVENT_READ, _LISTENER)
    if cancel is not None:
        sel.register(cancel.fileno(), selectors.EVENT_READ, _CANCEL)

    def close_attempt(att: _Attempt) -> None:
        if att.sock is not None:
            try:
                sel.unregister(att.sock)
            except (KeyError, ValueError):
                pass
            att.sock.close()
            att.sock = None

    reported: dict[int, PunchResult] = {}

    def report(p: _Peer, result: PunchResult) -> None:
        reported[id(p)] = result
        if on_result is not None:
            on_result(p.key, result)  # type: ignore[arg-type]

    def succeed(p: _Peer, sock: socket.socket, remote: Endpoint, via: str, now: float) -> None:
        _tune_connected(sock)
        if p.sock is None:
            p.sock, p.remote, p.via, p.done_at = sock, remote, via, now
            p.settle_until = now + settle
        else:
            p.extras.append(sock)
        if settle <= 0:
            for other in p.attempts:
                close_attempt(other)
            if id(p) not in reported:
                report(p, _success(p, now0))

    def start_attempt(att: _Attempt, now: float) -> None:
        att.tries += 1
        att.started = now
        try:
            sock = bind_reusable(local_ip, local_port)
        except OSError as exc:
            # e.g. EADDRINUSE: something holds the port without SO_REUSEPORT
            att.note_error(f"bind {_errname(exc.errno or 0)}")
            att.next_try = now + rng.uniform(lo, hi)
            return
        sock.setblocking(False)
        rc = sock.connect_ex(att.endpoint)
        if rc == 0:
            # Rare for TCP (immediate completion); treat like a writable event.
            att.connected = True
            succeed(att.peer, sock, att.endpoint, "connect", now)
            return
        if rc in (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
            att.sock = sock
            sel.register(sock, selectors.EVENT_WRITE, att)
            return
        # Immediate failure: EADDRNOTAVAIL (4-tuple in use: an accepted or
        # earlier connection to this endpoint exists), ENETUNREACH (no
        # route), ...  Retry later.
        sock.close()
        att.note_error(_errname(rc))
        att.next_try = now + rng.uniform(lo, hi)

    def on_writable(att: _Attempt, now: float) -> None:
        sock = att.sock
        assert sock is not None
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err == 0:
            try:
                sock.getpeername()
            except OSError as exc:  # not really connected after all
                err = exc.errno or errno.ENOTCONN
        if err == 0:
            sel.unregister(sock)
            att.sock = None
            att.connected = True
            succeed(att.peer, sock, att.endpoint, "connect", now)
            return
        close_attempt(att)
        att.note_error(_errname(err))
        att.next_try = now + rng.uniform(lo, hi)

    def on_acceptable(now: float) -> None:
        assert listener is not None
        while True:
            try:
                conn, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. ECONNABORTED; the peer will retry
            ep = _normalize(addr)
            p = by_endpoint.get(ep)
            if p is None:
                if unmatched is not None:
                    unmatched.append((_tune_connected(conn), ep))
                else:
                    conn.close()
                continue
            # Our own attempt to the same endpoint (if any) cannot succeed
            # now -- the 4-tuple is taken by this connection -- so stop it.
            for att in p.attempts:
                if att.endpoint == ep:
                    close_attempt(att)
                    att.connected = True
            succeed(p, conn, ep, "accept", now)

    try:
        while True:
            now = clock()
            if cancel is not None:
                for p in peer_states:
                    if not p.finished and not p.cancelled and cancel.cancelled(p.key):
                        p.cancelled = True
                        for att in p.attempts:
                            close_attempt(att)
            # (a peer without candidates can only fail)
            pending = [p for p in peer_states if not p.finished and not p.cancelled and p.attempts]
            settling = [p for p in peer_states
                        if p.finished and p.settle_until is not None and now < p.settle_until]
            for p in peer_states:
                if p.finished and p.settle_until is not None and now >= p.settle_until:
                    for att in p.attempts:
                        close_attempt(att)
                    p.settle_until = None
            if now >= deadline or (not pending and not settling):
                break

            # Launch due attempts, recycle silent ones; find the next wake-up.
            wake = deadline
            for p in pending + settling:
                if p.settle_until is not None:
                    wake = min(wake, p.settle_until)
                if not active:
                    continue
                for att in p.attempts:
                    if att.connected:
                        continue
                    if att.sock is not None and now - att.started >= attempt_timeout:
                        close_attempt(att)
                        att.note_error(_SILENT)
                        att.next_try = now
                    if att.sock is None and now >= att.next_try:
                        start_attempt(att, now)
                        if p.finished and settle <= 0:
                            break
                    if att.sock is not None:
                        wake = min(wake, att.started + attempt_timeout)
                    elif not p.finished or settle > 0:
                        wake = min(wake, att.next_try)

            if settle <= 0 and not any(not p.finished and not p.cancelled and p.attempts for p in peer_states):
                continue  # an immediate connect finished the last peer
            for sk, _mask in sel.select(timeout=max(0.0, wake - clock())):
                now = clock()
                if sk.data is _LISTENER:
                    on_acceptable(now)
                elif sk.data is _CANCEL:
                    assert cancel is not None
                    cancel._drain()
                elif isinstance(sk.data, _Attempt):
                    if sk.data.sock is sk.fileobj:  # not closed meanwhile
                        on_writable(sk.data, now)
    finally:
        for p in peer_states:
            for att in p.attempts:
                close_attempt(att)
        if listener is not None:
            try:
                sel.unregister(listener)
            except (KeyError, ValueError):
                pass
            if own_listener is not None:
                # Take whatever the kernel already accepted for us: closing a
                # listener RSTs its queued connections, which the peer
                # believes are established.
                on_acceptable(clock())
                own_listener.close()
            else:
                listener.settimeout(listener_timeout)
        sel.close()

    end = clock()
    results: dict[K, PunchResult] = {}
    for key, p in zip(peers.keys(), peer_states, strict=True):
        result = reported.get(id(p))
        if result is not None:
            result.extra_socks.extend(s for s in p.extras if s not in result.extra_socks)
        elif p.sock is not None:
            result = _success(p, now0)
            report(p, result)
        else:
            errors = {a.endpoint: (a.last_error or "not attempted") for a in p.attempts}
            result = PunchResult(ok=False, sock=None, remote=None, via=None,
                                 reason=_failure_reason(key, p, end - now0, active),
                                 elapsed=end - now0, attempts=sum(a.tries for a in p.attempts), errors=errors)
            report(p, result)
        results[key] = result
    return results


def _success(p: _Peer, now0: float) -> PunchResult:
    assert p.sock is not None and p.done_at is not None
    return PunchResult(ok=True, sock=p.sock, remote=p.remote, via=p.via,
                       reason=f"connected via {p.via} to "
                              f"{p.remote[0]}:{p.remote[1]}" if p.remote else "",
                       elapsed=p.done_at - now0, attempts=sum(a.tries for a in p.attempts),
                       errors={a.endpoint: (a.last_error or "not attempted") for a in p.attempts},
                       extra_socks=p.extras)


def _failure_reason(key: Hashable, p: _Peer, elapsed: float, active: bool) -> str:
    if p.cancelled:
        return f"hole punch to peer {key!r} cancelled after {elapsed:.2f}s"
    if not p.attempts:
        return f"peer {key!r}: no candidate endpoints"
    if not active:
        return f"peer {key!r}: nobody connected to the listener within {elapsed:.2f}s"
    parts = []
    for a in p.attempts:
        counts = ", ".join(f"{k} x{v}" for k, v in a.error_counts.items()) or "pending"
        parts.append(f"{a.endpoint[0]}:{a.endpoint[1]} [{a.tries} tries: {counts}]")
    kinds = {k for a in p.attempts for k in a.error_counts}
    # Unreachable private candidates are normal (another LAN's address), so
    # the most telling error decides the hint.
    if "ECONNREFUSED" in kinds:
        hint = ("peer reachable but nothing accepted (RST): it did not punch or listen "
                "on that port in time")
    elif _SILENT in kinds or not kinds:
        hint = ("SYNs vanished without answer: the peer did not punch in time, or a NAT on "
                "either side is symmetric (endpoint-dependent mapping)")
    else:
        hint = "no route to any candidate"
    hint += "; fall back to the relay"
    return (f"hole punch to peer {key!r} failed after {elapsed:.2f}s: {hint}; "
            + "; ".join(parts))


def punch(
    local_addr: tuple[str, int],
    candidates: Sequence[Endpoint],
    deadline: float | None = None,
    **kwargs: object,
) -> PunchResult:
    """Single-peer :func:`punch_many` (same keyword arguments)."""
    return punch_many(local_addr, {0: candidates}, deadline, **kwargs)[0]  # type: ignore[arg-type]
