"""The launcher's view of a job: create it at the relay and follow its events.

Whatever the relay URL names (fmpi-relay, Redis, an in-process store), a
``JobControl`` from ``rendezvous.job_control`` creates the job and feeds
the same ``JobState``, so the backends cannot tell them apart.
"""

from __future__ import annotations

import secrets
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import rendezvous, settings
from ..rank.spec import RankSpec
from ..rendezvous.relay_connection import Aborted, RelayError
from ..rendezvous.urls import FMPI_RELAY, display_url
from ..rendezvous.urls import parse as parse_url
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
        # A relay that restarts mid-job gets the job again (resume) if it is back within this long.
        rejoin_within = 0.0 if embedded_relay else settings.current().relay_rejoin
        # Several fmpi-relays with FMPI_SHARD_RENDEZVOUS=1: the rendezvous spread over them (rendezvous/fmpi_shards.py).
        url = parse_url(relay_url)
        self.sharded = settings.current().shard_rendezvous and url.kind == FMPI_RELAY and len(url.addresses) > 1
        self._control = rendezvous.job_control(relay_url, rejoin_within, self.sharded)
        self._control.create(self.id, self.token, size, fill_timeout, self)

    def spec(self, rank: int) -> RankSpec:
        return RankSpec(
            self.id, rank, self.size, self.relay_url, self.token, fill_timeout=self.fill_timeout, channel=self.channel,
            rejoin=0.0 if self.embedded_relay else None, sharded=self.sharded,
        )

    def abort(self, code: int, reason: str) -> None:
        try:
            self._control.abort(code, reason)
        except RelayError:
            pass
        except Exception as exc:  # noqa: BLE001 - a redis-py error: the ranks are killed anyway
            log(f"could not abort the job through {display_url(self.relay_url)}: {exc}")

    def end(self) -> None:
        """Done with the job: the relay forgets it (with Redis: every key of the job is deleted)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._control.end()
        except Exception as exc:  # noqa: BLE001 - Redis: the keys' TTL removes them later
            log(f"could not delete job {self.id} from {display_url(self.relay_url)} (its keys expire on their own): {exc}")

    def wait(self, predicate: Callable[[JobState], bool], timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.state), timeout)

    # ------------------------------------------ JobEvents (the JobControl's thread)
    def event(self, kind: str, body: dict[str, Any]) -> None:
        if kind == "output":
            if self._on_output is not None:
                self._on_output(body["rank"], body["stream"], body["data"])
            return
        self._update(lambda s: _apply(s, kind, body))
        if self._on_event is not None:
            self._on_event(kind, body)

    def aborted(self, exc: Aborted) -> None:
        self._update(lambda s: s.aborts.append(exc))

    def failed(self, exc: RelayError) -> None:
        if not self._closed:
            self._update(lambda s: setattr(s, "failure", exc))

    def resume_state(self) -> dict[str, Any] | None:
        """What a restarted relay needs to take the job back: every live rank's incarnation, who finished."""
        with self._cond:
            if self.state.world_seconds is None:
                return None  # (before the world is out, ranks cannot rejoin)
            finished = {str(r): c for r, c in self.state.finished.items()}
            incarnations = {str(r): self.state.incarnations.get(r, "") for r in range(self.size) if str(r) not in finished}
        return {"incarnations": incarnations, "finished": finished}

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
