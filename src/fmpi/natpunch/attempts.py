"""The state of one punch: per peer, one attempt per candidate endpoint; and how a peer's punch ends (``PunchResult``)."""

from __future__ import annotations

import errno
import socket
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

Endpoint = tuple[str, int]


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


@dataclass(eq=False)
class Attempt:
    peer: PeerPunch
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
class PeerPunch:
    key: Hashable
    attempts: list[Attempt] = field(default_factory=list)
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


# Pseudo error of an attempt that got no answer within attempt_timeout.
# Every error is retried (the peer may start punching at any moment); the
# errno names only feed the failure reason.
SILENT = "no answer (SYN dropped or unanswered)"


def errname(code: int) -> str:
    return errno.errorcode.get(code, str(code))


def normalize(endpoint: Sequence[object]) -> Endpoint:
    ip, port = endpoint[0], endpoint[1]
    return (str(ip), int(port))  # type: ignore[call-overload]


def success(p: PeerPunch, now0: float) -> PunchResult:
    assert p.sock is not None and p.done_at is not None
    return PunchResult(ok=True, sock=p.sock, remote=p.remote, via=p.via,
                       reason=f"connected via {p.via} to "
                              f"{p.remote[0]}:{p.remote[1]}" if p.remote else "",
                       elapsed=p.done_at - now0, attempts=sum(a.tries for a in p.attempts),
                       errors={a.endpoint: (a.last_error or "not attempted") for a in p.attempts},
                       extra_socks=p.extras)


def failure_reason(key: Hashable, p: PeerPunch, elapsed: float, active: bool) -> str:
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
    elif SILENT in kinds or not kinds:
        hint = ("SYNs vanished without answer: the peer did not punch in time, or a NAT on "
                "either side is symmetric (endpoint-dependent mapping)")
    else:
        hint = "no route to any candidate"
    return (f"hole punch to peer {key!r} failed after {elapsed:.2f}s: {hint}; "
            + "; ".join(parts))
