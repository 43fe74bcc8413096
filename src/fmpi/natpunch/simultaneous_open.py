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

What Linux does with a shared port and simultaneous opens (measured in the NAT
lab) is in the package docstring, ``fmpi/natpunch/__init__.py``.

A punch uses only the standard library and runs one selector loop (no
threads, no busy waiting: the loop sleeps in select() until the next socket
event, retry time or deadline) that punches all peers in parallel. The loop
is a state machine, ``Puncher`` (``puncher.py``): per peer a list of attempts
(one per candidate endpoint), each closed, in flight, or connected;
``punch_many`` runs one. The shared-port sockets are in ``sockets.py``, cancelling from another
thread in ``cancel.py``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from .attempts import Endpoint, PunchResult
from .cancel import PunchCancel
from .puncher import ATTEMPT_TIMEOUT, DEFAULT_TIMEOUT, RETRY_INTERVAL, Puncher, deadline_in

__all__ = [
    "ATTEMPT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "RETRY_INTERVAL",
    "Endpoint",
    "PunchCancel",
    "PunchResult",
    "Puncher",
    "deadline_in",
    "punch",
    "punch_many",
]

K = TypeVar("K", bound=Hashable)


def punch_many(
    local_addr: tuple[str, int],
    peers: Mapping[K, Sequence[Endpoint]],
    deadline: float | None = None,
    **options: object,
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
    return Puncher(local_addr, peers, deadline, **options).run()  # type: ignore[arg-type]


def punch(
    local_addr: tuple[str, int],
    candidates: Sequence[Endpoint],
    deadline: float | None = None,
    **kwargs: object,
) -> PunchResult:
    """Single-peer :func:`punch_many` (same keyword arguments)."""
    return punch_many(local_addr, {0: candidates}, deadline, **kwargs)[0]  # type: ignore[arg-type]
