"""The launcher's view of a job: create it at the relay and follow its events.

The relay is fmpi-relay (tcp://) or Redis (redis://, through ``RedisJob``);
both feed the same ``JobState``, so the backends cannot tell them apart.
"""

from __future__ import annotations

import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import settings
from ..rank.spec import RankSpec, display_url
from ..rendezvous.redis import RedisJob
from ..rendezvous.redis_connect import is_redis_url
from ..rendezvous.relay_connection import (
    Aborted,
    RelayConnection,
    RelayError,
    open_with,
)
from ..wire.relay_protocol import Kind
from .link_table import LinkTable


@dataclass
class JobState:
    joined: set[int] = field(default_factory=set)
    world_seconds: float | None = None
    finished: dict[int, int] = field(default_factory=dict)  # rank -> exit code it reported
    lost: set[int] = field(default_factory=set)
    silent: dict[int, float] = field(default_factory=dict)  # lost ranks the relay dropped for silence -> seconds
    aborts: list[Aborted] = field(default_factory=list)  # every abort the relay relayed, in order
    failure: RelayError | None = None
    incarnations: dict[int, str] = field(default_factory=dict)  # rank -> the incarnation it joined as
    links: LinkTable = field(default_factory=LinkTable)  # rank pair -> channel, set-up time, failovers

    @property
    def abort(self) -> Aborted | None:
        return self.aborts[0] if self.aborts else None

    def rank_abort(self) -> Aborted | None:
        """The first abort a rank asked for that is not itself a consequence of an abort (or the relay's own, when
        it shut down).

        The launcher's own aborts are consequences (of a rank's exit), and so is
        a rank's abort over the "job aborted" error another abort gave it.
        """
        return next(
            (a for a in self.aborts if a.by_relay or (a.rank is not None and not (a.cause or {}).get("aborted"))), None
        )


class Job:
    """A job created at a relay; a daemon thread follows its events."""

    def __init__(
        self,
        relay_url: str,
        size: int,
        fill_timeout: float,
        on_output: Callable[[int, str, str], None] | None = None,
        on_event: Callable[[str, dict], None] | None = None,
        channel: str = "",
        embedded_relay: bool = False,
    ) -> None:
        self.relay_url = relay_url
        self.embedded_relay = embedded_relay  # the relay runs in this process: it cannot restart without us
        self.size = size
        self.fill_timeout = fill_timeout
        self.channel = channel
        self.id = "j" + secrets.token_hex(8)
        self.token = secrets.token_urlsafe(24)
        self.state = JobState()
        self._cond = threading.Condition()
        self._on_output = on_output
        self._on_event = on_event
        self._closed = False
        self.on_change: Callable[[], None] | None = None  # called after every state change
        self._redis: RedisJob | None = None
        if is_redis_url(relay_url):
            self._created = time.monotonic()
            self._redis = RedisJob(relay_url, self.id, self.token, size, fill_timeout, self._on_redis_event)
            return
        # A relay that restarts mid-job gets the job again (resume) if it is back within this long.
        self._rejoin_within = 0.0 if embedded_relay else settings.current().relay_rejoin
        self._conn = self._create()
        self._thread = threading.Thread(target=self._follow, name="fmpi-job-events", daemon=True)
        self._thread.start()

    def _create(self, resume: dict | None = None) -> RelayConnection:
        """CREATE the job at the relay (again, with `resume`, after the relay restarted)."""
        body = {"job": self.id, "token": self.token, "size": self.size, "fill_timeout": self.fill_timeout}
        if resume is not None:
            body["resume"] = resume
        return open_with(self.relay_url, Kind.CREATE, body, 10.0)

    def _resume(self, lost: RelayError) -> bool:
        """The relay connection broke mid-job: wait for the relay to come back and re-create the job there.

        A restarted fmpi-relay knows nothing of the job. Created again with
        every rank's incarnation, it takes the live ranks back (they rejoin on
        their own) and the job carries on; see docs/troubleshooting.md.
        """
        within = self._rejoin_within
        if within <= 0 or lost.code != "lost" or self.state.world_seconds is None:
            return False  # (before the world is out, ranks cannot rejoin: let the job fail)
        url = display_url(self.relay_url)
        log(f"lost the relay at {url} ({lost}); waiting up to {within:g} s for it to come back")
        deadline = time.monotonic() + within
        with self._cond:
            finished = {str(r): c for r, c in self.state.finished.items()}
            incarnations = {str(r): self.state.incarnations.get(r, "") for r in range(self.size) if str(r) not in finished}
        resume = {"incarnations": incarnations, "finished": finished, "rejoin_timeout": within}
        while not self._closed and time.monotonic() < deadline:
            try:
                self._conn = self._create(resume)
            except RelayError as exc:
                if exc.code not in ("unreachable", "lost", "timeout"):
                    log(f"the relay at {url} came back but refused the job: {exc}")
                    return False
                time.sleep(0.2)
                continue
            log(f"the relay at {url} is back; the job resumed there")
            return True
        return False

    def spec(self, rank: int) -> RankSpec:
        return RankSpec(
            self.id, rank, self.size, self.relay_url, self.token, fill_timeout=self.fill_timeout, channel=self.channel,
            rejoin=0.0 if self.embedded_relay else None,
        )

    def abort(self, code: int, reason: str) -> None:
        try:
            if self._redis is not None:
                self._redis.abort(code, reason)
            else:
                self._conn.send(Kind.ABORT, {"code": code, "reason": reason})
        except RelayError:
            pass
        except Exception as exc:  # noqa: BLE001 - a redis-py error: the ranks are killed anyway
            log(f"could not abort the job through {display_url(self.relay_url)}: {exc}")

    def end(self) -> None:
        """Done with the job: the relay forgets it (with Redis: every key of the job is deleted)."""
        if self._closed:
            return
        self._closed = True
        if self._redis is not None:
            try:
                self._redis.end()
            except Exception as exc:  # noqa: BLE001 - the keys' TTL removes them later
                log(f"could not delete job {self.id} from {display_url(self.relay_url)} (its keys expire on their own): {exc}")
            return
        try:
            self._conn.send(Kind.END, {"job": self.id})
        except RelayError:
            pass
        self._conn.close()

    def wait(self, predicate: Callable[[JobState], bool], timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.state), timeout)

    def _follow(self) -> None:
        while True:
            try:
                kind, body = self._conn.recv(timeout=None)
            except Aborted as exc:
                self._update(lambda s, exc=exc: s.aborts.append(exc))
                continue
            except RelayError as exc:
                if self._closed or any(a.by_relay for a in self.state.aborts):
                    return  # (a relay that ended the job hangs up next: not a failure of its own)
                if self._resume(exc):
                    continue
                self._update(lambda s, exc=exc: setattr(s, "failure", exc))
                return
            except OSError:
                return
            if kind is not Kind.EVENT:
                continue
            kind_name = body.get("type")
            if kind_name == "output" and self._on_output is not None:
                self._on_output(body["rank"], body["stream"], body["data"])
                continue
            self._update(lambda s: _apply(s, kind_name, body))
            if self._on_event is not None:
                self._on_event(kind_name, body)

    def _on_redis_event(self, kind: str, body: dict) -> None:
        """An event from the job's Redis list (RedisJob's thread): the same effects as fmpi-relay's frames."""
        if kind == "abort":
            exc = Aborted.from_body(body)
            self._update(lambda s: s.aborts.append(exc))
            return
        if kind == "error":
            failure = RelayError(str(body.get("message", "the job failed")), str(body.get("code", "error")), body)
            if not self._closed:
                self._update(lambda s: setattr(s, "failure", failure))
            return
        if kind == "output":
            if self._on_output is not None:
                self._on_output(body["rank"], body["stream"], body["data"])
            return
        if kind == "world":  # Redis has no monotonic clock of ours: time it here
            body = {**body, "seconds": round(time.monotonic() - self._created, 6)}
        self._update(lambda s: _apply(s, kind, body))
        if self._on_event is not None:
            self._on_event(kind, body)

    def _update(self, change: Callable[[JobState], None]) -> None:
        with self._cond:
            change(self.state)
            self._cond.notify_all()
        if self.on_change is not None:
            self.on_change()


def _apply(state: JobState, kind: str, body: dict) -> None:
    if kind == "joined":
        state.joined.add(body["rank"])
        if isinstance(body.get("incarnation"), str):
            state.incarnations[body["rank"]] = body["incarnation"]
    elif kind == "left":
        state.joined.discard(body["rank"])
    elif kind == "world":
        state.world_seconds = body["seconds"]
    elif kind == "finished":
        state.finished[body["rank"]] = body["code"]
        for report in body.get("links") or []:
            state.links.add(body["rank"], report)
    elif kind == "link":
        state.links.add(body["rank"], body)
    elif kind == "lost":
        state.lost.add(body["rank"])
        if isinstance(body.get("silent"), (int, float)):
            state.silent[body["rank"]] = float(body["silent"])


#: fmpirun's exit status when its own deadline passed (the world did not fill), as timeout(1)'s.
EXIT_TIMEOUT = 124


def failure_status(failure: RelayError) -> int:
    """The exit status for a job the relay failed: EXIT_TIMEOUT for a world that did not fill, else 1 (fmpi's own)."""
    return EXIT_TIMEOUT if failure.code == "fill_timeout" else 1


def log(message: str) -> None:
    print(f"fmpirun: {message}", file=sys.stderr, flush=True)
