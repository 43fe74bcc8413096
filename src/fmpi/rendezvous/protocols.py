"""What a rendezvous backend does, for the rank (``Rendezvous``) and for the launcher (``JobControl``).

Three backends implement both, and the name service MPI's ``Publish_name``
/ ``Lookup_name`` use (``NameService``, ``rendezvous.names(url, ...)``): fmpi-relay (``fmpi_relay.py``), Redis
(``redis.py``) and an in-process store for tests (``memory.py``).
``rendezvous.connect(url)`` / ``rendezvous.job_control(url)`` pick one from
the URL; nothing else looks at the scheme.

After the world is out, a rank's backend hands the transport a *carrier*:
the rank's line to the service while the job runs (FORWARD chunks of
relayed links, heartbeats, FINISHED, ABORT, LINK, OUTPUT, LOOKUP; ABORT,
ERROR and PEERS back; the transport's ``RelayLine``). fmpi-relay's carrier
is the registration connection itself, a socket speaking the relay byte
protocol, and so is the in-process store's (a socketpair it serves); Redis
hands over a line that speaks Redis directly (``redis_line.py``). So the
engine's heartbeats and the rank's abort and finalize notices travel the
same way whatever the backend.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Protocol

from ..wire.errors import Aborted, RelayError


@dataclass(frozen=True)
class Registered:
    """A rank's slot: what it registered with, to take the same slot again at a restarted relay."""

    rank: int
    size: int
    local: tuple[str, int]  # the shared port (relay connection, listener, punching)
    observed: tuple[str, int]  # where the rendezvous saw the rank come from; peers punch there
    probe: tuple[str, int] | None = None  # where the relay's probe port saw it (NAT type), if probed
    incarnation: str = ""  # this process's id: a duplicate invocation of the slot is refused


@dataclass
class Carrier:
    """The rank's line to the service, handed to the transport after the world: either a socket speaking the
    fmpi-relay protocol (`sock`, with `pending`: bytes already read from it, which belong to the new owner), or a
    line the backend serves in-process (`line`: an object with the transport's ``RelayLine`` methods).

    `reconnected` (from ``rejoin``): the service had stayed up; only the connection was lost (else it had
    restarted).
    """

    sock: socket.socket | None = None
    pending: bytes = b""
    line: Any = None
    reconnected: bool = False


class Rendezvous(Protocol):
    """A rank's side of the rendezvous: open, register, wait for the world, hand over the carrier."""

    url: str
    can_rejoin: bool  # the service may restart under a running job, and the rank take its slot again

    def local_ip(self) -> str:
        """The local address that reaches the rendezvous (the rank listens there)."""
        ...

    def open(self, shared: socket.socket, timeout: float) -> None:
        """Connect from `shared` (bound to the rank's one port, not connected): the rendezvous then observes the
        address peers must punch to. Probes the NAT type where the backend can."""
        ...

    def register(self, rank: int, incarnation: str, timeout: float) -> Registered:
        """Take slot `rank` (-1: any free one); RelayError if refused (duplicate, auth, bad_rank, closed...)."""
        ...

    def wait_world(self, deadline: float) -> int:
        """Block until every slot is taken; the job's size. RelayError / Aborted if the job failed or was aborted
        first. The world names no peer: the transport looks up those it links to (LOOKUP on the carrier)."""
        ...

    def carrier(self) -> Carrier:
        """After the world: the carrier for the transport (the backend's connections go with it)."""
        ...

    def rejoin(self, registered: Registered, timeout: float) -> Carrier | None:
        """Register `registered` again, on a new connection (the old one broke, or the service restarted), and
        return the new carrier; None where the backend cannot (Redis, memory). RelayError while the service is
        not back, or if it refuses the rank."""
        ...

    def close(self) -> None:
        """Give up before the carrier was handed over (a refused or failed join)."""
        ...


class JobEvents(Protocol):
    """What a JobControl tells the launcher (called on the backend's own thread)."""

    def event(self, kind: str, body: dict[str, Any]) -> None:
        """joined, left, world (with ``seconds``), finished, link, away, rejoined, lost, output."""
        ...

    def aborted(self, exc: Aborted) -> None: ...

    def failed(self, exc: RelayError) -> None:
        """The job failed (fill deadline, lost service); no further events follow."""
        ...

    def resume_state(self) -> dict[str, Any] | None:
        """What a restarted relay needs to take the job back, or None while that is impossible."""
        ...


class JobControl(Protocol):
    """The launcher's side: create a job, hear its events, abort it, end it."""

    def create(self, job: str, token: str, size: int, fill_timeout: float, events: JobEvents) -> None:
        """Create the job (RelayError if refused or unreachable); `events` hears everything after."""
        ...

    def abort(self, code: int, reason: str) -> None:
        """End every rank of the job with `code`."""
        ...

    def end(self) -> None:
        """Done: the service forgets the job (and deletes what it stored)."""
        ...


class NameService(Protocol):
    """MPI name publishing at a job's relay (fmpi-relay, Redis, memory://): service name -> port name.

    Every request names the caller's job (and proves it with the job's token where the backend can): a name
    belongs to the job that published it and goes away when that job ends (rules and limits: wire/names.py).
    Refusals are RelayError with the codes listed there; an unreachable service is RelayError too.
    """

    def publish(self, name: str, port: str) -> None:
        """Publish `name` -> `port` (``name_taken`` if it is published already, ``names_full``)."""
        ...

    def unpublish(self, name: str, port: str) -> None:
        """Withdraw `name`, published with `port` (``name_unknown``, ``name_port``)."""
        ...

    def lookup(self, name: str) -> str:
        """The port published under `name` (``name_unknown``)."""
        ...
