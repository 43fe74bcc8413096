"""The Redis backend of ``Rendezvous`` and ``JobControl``: ``RedisRank`` and ``RedisJob`` behind the protocols.

The carrier a rank hands its transport is a ``RedisLine`` (relayed chunks
in Redis lists, notices in the rank's inbox, spoken directly). Redis does not restart under a job, so a rank never rejoins.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from ..wire.errors import Aborted, RelayError
from .protocols import Carrier, JobEvents, Registered
from .redis import RedisJob, RedisRank
from .redis_line import RedisLine
from .redis_connect import source_ip


class RedisRendezvous:
    """A rank's registration in Redis."""

    can_rejoin = False

    def __init__(self, url: str, job: str, token: str) -> None:
        self.url, self.job, self._token = url, job, token
        self._member: RedisRank | None = None
        self._shared: socket.socket | None = None

    def local_ip(self) -> str:
        return source_ip(self.url)

    def open(self, shared: socket.socket, timeout: float) -> None:
        # The registration connection is made from the shared port, so the address Redis sees is
        # the one peers punch to. `shared` holds the port until the world is out.
        self._shared = shared
        self._member = RedisRank(self.url, self.job, self._token, source=shared.getsockname()[:2], timeout=timeout)

    def register(self, rank: int, incarnation: str, timeout: float) -> Registered:
        member, local = self._opened()
        got, size = member.register(rank, incarnation, [local])
        assert member.observed is not None
        return Registered(got, size, local, member.observed, None, incarnation)

    def wait_world(self, deadline: float) -> int:
        return self._opened()[0].wait_world(deadline)

    def carrier(self) -> Carrier:
        line = RedisLine(self._opened()[0])
        self._release_port()
        return Carrier(line=line)

    def rejoin(self, registered: Registered, timeout: float) -> Carrier | None:
        return None

    def close(self) -> None:
        self._release_port()
        if self._member is not None:
            for client in self._member.hand_over():
                client.close()

    def _release_port(self) -> None:
        if self._shared is not None:
            self._shared.close()
            self._shared = None

    def _opened(self) -> tuple[RedisRank, tuple[str, int]]:
        if self._member is None or self._shared is None:
            raise RelayError("the rendezvous was not opened", "protocol")
        return self._member, self._shared.getsockname()[:2]


class RedisJobControl:
    """A job kept in Redis; ``RedisJob``'s thread turns its event list into `events` calls."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._job: RedisJob | None = None
        self._created = 0.0
        self._events: JobEvents | None = None

    def create(self, job: str, token: str, size: int, fill_timeout: float, events: JobEvents) -> None:
        self._events = events
        self._created = time.monotonic()
        self._job = RedisJob(self.url, job, token, size, fill_timeout, self._on_event)

    def abort(self, code: int, reason: str) -> None:
        if self._job is not None:
            self._job.abort(code, reason)

    def end(self) -> None:
        """Delete every key of the job (mailboxes included)."""
        if self._job is not None:
            self._job.end()

    def _on_event(self, kind: str, body: dict[str, Any]) -> None:
        events = self._events
        assert events is not None
        if kind == "abort":
            events.aborted(Aborted.from_body(body))
        elif kind == "error":
            events.failed(RelayError(str(body.get("message", "the job failed")), str(body.get("code", "error")), body))
        else:
            if kind == "world":  # Redis has no monotonic clock of ours: time it here
                body = {**body, "seconds": round(time.monotonic() - self._created, 6)}
            events.event(kind, body)
