"""The fmpi-relay backend of ``Rendezvous`` and ``JobControl``, over ``RelayConnection``.

The rank's registration connection, made from its shared port, stays open
as the carrier of relayed links after the world is out. The launcher's
connection follows the job's events; if the relay restarts mid-job it waits
for it and creates the job again with every live rank's incarnation, so the
ranks can rejoin (see docs/troubleshooting.md). ``FmpiRelayNames`` asks the
relay's name table (MPI name publishing), one connection per request.
"""

from __future__ import annotations

import random
import socket
import sys
import threading
import time
import zlib
from typing import Any

from ..natpunch.sockets import bind_reusable
from ..util.retry import retry_until
from ..wire.nat_kinds import nat_kind
from ..wire.relay_protocol import Kind
from .protocols import Carrier, JobEvents, Registered
from .relay_connection import (
    Aborted,
    RelayConnection,
    RelayError,
    observe,
    open_with,
    probe_nat,
    register,
    route_source_ip,
    wait_world,
)
from .urls import display_url, shard_urls

# Codes of a restarted relay that is not (fully) back yet: try again.
NOT_BACK = ("unknown_job", "lost", "timeout", "unreachable")


class FmpiRelayRendezvous:
    """A rank's registration at fmpi-relay: the first relay of the URL, or with `sharded` relay ``rank % k`` of its
    k (a rank that takes any slot starts at one its incarnation picks, and moves on while they are full: a
    duplicate delivery of the same invocation follows it, and is refused as a duplicate where it joined)."""

    can_rejoin = True  # a restarted relay takes the job back from the launcher, then its ranks

    def __init__(self, url: str, job: str, token: str, rank: int = -1, sharded: bool = False, incarnation: str = "") -> None:
        self.url, self.job, self._token = url, job, token
        self._shards = shard_urls(url) if sharded else [url]
        k = len(self._shards)
        self._shard = rank % k if rank >= 0 else zlib.crc32(incarnation.encode()) % k if incarnation else random.randrange(k)
        self._conn: RelayConnection | None = None
        self._local: tuple[str, int] | None = None
        self._probe: tuple[str, int] | None = None
        self._nat: dict[str, str] | None = None  # the NAT this rank is behind, for the launcher

    @property
    def _at(self) -> str:
        """The URL of the relay this rank registers at."""
        return self._shards[self._shard]

    def local_ip(self) -> str:
        return route_source_ip(self._at)

    def open(self, shared: socket.socket, timeout: float) -> None:
        local_ip, port = shared.getsockname()[:2]
        self._local = (local_ip, port)
        self._conn = RelayConnection(self._at, timeout=timeout, sock=shared)
        observed, probe_port = observe(self._conn, timeout)
        note = ""
        if observed != self._local:
            # Behind a NAT: a second connection from the same port tells a cone NAT from a symmetric one.
            if probe_port is None:
                note = "the relay has no probe port"
            else:
                self._probe, note = probe_nat(self._at, probe_port, lambda: bind_reusable(local_ip, port))
        self._nat = {"kind": nat_kind([self._local], observed, self._probe), **({"note": note} if note else {})}

    def register(self, rank: int, incarnation: str, timeout: float) -> Registered:
        conn, local = self._opened()
        tries = len(self._shards)
        while True:
            try:
                got, size, observed = register(conn, self.job, self._token, rank, incarnation, [local], timeout,
                                               self._probe, nat=self._nat)
                return Registered(got, size, local, observed, self._probe, incarnation)
            except RelayError as exc:
                tries -= 1
                if exc.code != "shard_full" or tries == 0:
                    raise
            # Every slot of this relay is taken (sharded): any free slot of the next one, from the same port.
            conn.close()
            self._shard, rank = (self._shard + 1) % len(self._shards), -1
            conn = self._conn = RelayConnection(self._at, timeout=timeout, sock=bind_reusable(*local))

    def wait_world(self, deadline: float) -> int:
        return wait_world(self._opened()[0], deadline)

    def carrier(self) -> Carrier:
        conn = self._opened()[0]
        return Carrier(conn.sock, conn.take_buffer())

    def rejoin(self, registered: Registered, timeout: float) -> Carrier | None:
        # The old connection broke, or the relay restarted (and the launcher created the job there again).
        # From a new port: the old connection's (from the shared port) may linger in the kernel.
        conn = RelayConnection(self._at, timeout=min(timeout, 2.0))
        try:
            register(conn, self.job, self._token, registered.rank, registered.incarnation, [registered.local], timeout,
                     registered.probe, rejoin_as=registered.observed)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return Carrier(conn.sock, conn.take_buffer(), reconnected=conn.reconnected)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def _opened(self) -> tuple[RelayConnection, tuple[str, int]]:
        if self._conn is None or self._local is None:
            raise RelayError("the rendezvous was not opened", "protocol")
        return self._conn, self._local


class FmpiRelayJobControl:
    """A job created at fmpi-relay; a daemon thread follows its events."""

    def __init__(self, url: str, rejoin_within: float = 0.0) -> None:
        self.url = url
        self._rejoin_within = rejoin_within  # a relay back within this long gets the job again (0: never)
        self._closed = False
        self._ended_by_relay = False
        self._body: dict[str, Any] = {}
        self._conn: RelayConnection | None = None
        self._events: JobEvents | None = None

    def create(self, job: str, token: str, size: int, fill_timeout: float, events: JobEvents) -> None:
        self._body = {"job": job, "token": token, "size": size, "fill_timeout": fill_timeout}
        self._events = events
        self._conn = open_with(self.url, Kind.CREATE, self._body, 10.0)
        threading.Thread(target=self._follow, args=(events,), name="fmpi-job-events", daemon=True).start()

    def abort(self, code: int, reason: str) -> None:
        if self._conn is not None:
            self._conn.send(Kind.ABORT, {"code": code, "reason": reason})

    def end(self) -> None:
        if self._closed or self._conn is None:
            return
        self._closed = True
        try:
            self._conn.send(Kind.END, {"job": self._body["job"]})
        except RelayError:
            pass
        self._conn.close()

    def _follow(self, events: JobEvents) -> None:
        while True:
            conn = self._conn
            assert conn is not None
            try:
                kind, body = conn.recv(timeout=None)
            except Aborted as exc:
                self._ended_by_relay |= exc.by_relay
                events.aborted(exc)
                continue
            except RelayError as exc:
                if self._closed or self._ended_by_relay:
                    return  # (a relay that ended the job hangs up next: not a failure of its own)
                if self._resume(exc, events):
                    continue
                events.failed(exc)
                return
            except OSError:
                return
            if kind is Kind.EVENT:
                events.event(str(body.get("type")), body)

    def _resume(self, lost: RelayError, events: JobEvents) -> bool:
        """The relay connection broke mid-job: wait for the relay to come back and create the job there again."""
        within = self._rejoin_within
        resume = events.resume_state() if within > 0 and lost.code == "lost" else None
        if resume is None:
            return False  # (before the world is out, ranks cannot rejoin: let the job fail)
        url = display_url(self.url)
        log(f"lost the relay at {url} ({lost}); waiting up to {within:g} s for it to come back")
        body = {**self._body, "resume": {**resume, "rejoin_timeout": within}}

        def attempt() -> RelayConnection:
            if self._closed:
                raise RelayError("the job ended", "closed")
            return open_with(self.url, Kind.CREATE, body, 10.0)

        try:
            self._conn = retry_until(attempt, time.monotonic() + within, 0.2,
                                     lambda exc: isinstance(exc, RelayError) and exc.code in NOT_BACK[1:])
        except RelayError as exc:
            if exc.code not in NOT_BACK and not self._closed:
                log(f"the relay at {url} came back but refused the job: {exc}")
            return False
        log(f"the relay at {url} is back; the job resumed there")
        return True


class FmpiRelayNames:
    """The name service of fmpi-relay: kept by the first relay of the URL (a sharded job is created there too, and
    ports meet there), so every job sharing the URL sees the same names. Each request is a connection of its own:
    the request, proving the caller's job with its token, then NAME_DONE or ERROR."""

    TIMEOUT = 10.0

    def __init__(self, url: str, job: str, token: str) -> None:
        self.url, self._job, self._token = url, job, token

    def publish(self, name: str, port: str) -> None:
        self._ask(Kind.NAME_PUBLISH, {"name": name, "port": port})

    def unpublish(self, name: str, port: str) -> None:
        self._ask(Kind.NAME_UNPUBLISH, {"name": name, "port": port})

    def lookup(self, name: str) -> str:
        port = self._ask(Kind.NAME_LOOKUP, {"name": name}).get("port")
        if not isinstance(port, str):
            raise RelayError(f"the relay at {display_url(self.url)} answered a lookup without a port", "protocol")
        return port

    def _ask(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        conn = RelayConnection(self.url, timeout=self.TIMEOUT)
        try:
            conn.send(kind, {"job": self._job, "token": self._token, **body})
            return conn.expect(Kind.NAME_DONE, self.TIMEOUT)
        except socket.timeout:
            raise RelayError(f"the relay at {display_url(self.url)} did not answer {kind.name} within "
                             f"{self.TIMEOUT:g} s", "timeout") from None
        finally:
            conn.close()


def log(message: str) -> None:
    print(f"fmpirun: {message}", file=sys.stderr, flush=True)
