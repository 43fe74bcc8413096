"""The launcher's side of a job whose rendezvous is sharded over several fmpi-relays (``FMPI_SHARD_RENDEZVOUS=1``).

The job is created on every relay of ``tcp://a,b,c``, each told its place
and the others' addresses (the relays then link up by themselves, proving
the job's token: ``relay_server/shards.py``). Rank r registers at relay
``r % k``, which sends that rank's events (joined, finished, output, link,
lost) to the launcher's connection to it; this module merges the k event
streams into the one ``JobEvents`` the launcher sees:

* the world is out once every relay said so (its ``seconds`` are the last's);
* an abort is passed on once (the launcher's own reaches every relay, and
  each tells it);
* a world that does not fill fails once, naming the missing ranks of every
  relay (each times out on its own and names its own);
* any other failure, such as a lost relay, fails the job: a sharded job
  cannot be resumed on a restarted relay.
"""

from __future__ import annotations

import threading
from typing import Any

from ..util.ranges import describe_ranks
from ..wire.relay_protocol import Kind
from .protocols import JobEvents
from .relay_connection import Aborted, RelayConnection, RelayError, open_with
from .urls import parse, shard_urls

FILL_GATHER = 2.0  # seconds to wait for every relay's fill timeout once one reported it


class ShardedJobControl:
    """A job created on every relay of the URL; a daemon thread per relay follows its events."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._urls = shard_urls(url)
        self._conns: list[RelayConnection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._done = False  # a failure was reported: nothing more goes to the events
        self._worlds: list[dict[str, Any]] = []
        self._aborts: set[tuple[Any, ...]] = set()
        self._fills: dict[int, RelayError] = {}
        self._body: dict[str, Any] = {}

    def create(self, job: str, token: str, size: int, fill_timeout: float, events: JobEvents) -> None:
        parsed = parse(self.url)
        relays = [list(a) for a in parsed.addresses]
        self._body = {"job": job, "token": token, "size": size, "fill_timeout": fill_timeout}
        try:
            for index, url in enumerate(self._urls):
                shards = {"index": index, "relays": relays, "tls": parsed.tls}
                self._conns.append(open_with(url, Kind.CREATE, {**self._body, "shards": shards}, 10.0))
        except BaseException:
            for conn in self._conns:  # (a launcher's connection that closes ends the job on that relay)
                conn.close()
            raise
        for index, conn in enumerate(self._conns):
            threading.Thread(target=self._follow, args=(index, conn, events), name=f"fmpi-job-events-{index}",
                             daemon=True).start()

    def abort(self, code: int, reason: str) -> None:
        for conn in self._conns:
            try:
                conn.send(Kind.ABORT, {"code": code, "reason": reason})
            except RelayError:
                pass  # (that relay is gone: its ranks end with it)

    def end(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in self._conns:
            try:
                conn.send(Kind.END, {"job": self._body.get("job", "")})
            except RelayError:
                pass
            conn.close()

    def _follow(self, index: int, conn: RelayConnection, events: JobEvents) -> None:
        while True:
            try:
                kind, body = conn.recv(timeout=None)
            except Aborted as exc:
                self._aborted(exc, events)
                continue
            except RelayError as exc:
                self._failed(index, exc, events)
                return
            except OSError:
                return
            if kind is Kind.EVENT:
                self._event(str(body.get("type")), body, events)

    def _event(self, kind: str, body: dict[str, Any], events: JobEvents) -> None:
        with self._lock:
            if self._done:
                return
            if kind == "world":
                self._worlds.append(body)
                if len(self._worlds) < len(self._urls):
                    return  # (the world is out once every relay published it)
            events.event(kind, body)

    def _aborted(self, exc: Aborted, events: JobEvents) -> None:
        with self._lock:
            key = (exc.rank, exc.exit_code, exc.reason, exc.by_relay)
            if self._done or key in self._aborts:
                return
            self._aborts.add(key)
            events.aborted(exc)

    def _failed(self, index: int, exc: RelayError, events: JobEvents) -> None:
        with self._lock:
            if self._closed or self._done:
                return
            if exc.code != "fill_timeout":
                self._done = True
                events.failed(exc)
                return
            self._fills[index] = exc
            if len(self._fills) == 1:
                threading.Timer(FILL_GATHER, self._fill_failed, args=(events,)).start()
            elif len(self._fills) == len(self._urls):
                self._report_fill(events)

    def _fill_failed(self, events: JobEvents) -> None:
        with self._lock:
            self._report_fill(events)

    def _report_fill(self, events: JobEvents) -> None:
        """(lock held) One failure for a world that did not fill, naming the missing ranks of every relay."""
        if self._done or self._closed:
            return
        self._done = True
        missing = sorted({r for exc in self._fills.values() for r in exc.details.get("missing", [])})
        size, timeout = self._body["size"], self._body["fill_timeout"]
        silent = len(self._urls) - len(self._fills)
        also = f" ({silent} of the job's relays did not say which of theirs)" if silent else ""
        message = (f"the world of job {self._body['job']!r} did not fill within {timeout:g} s: {size - len(missing)} of "
                   f"{size} ranks joined; missing ranks: {describe_ranks(missing) if missing else 'none named'}{also}")
        events.failed(RelayError(message, "fill_timeout", {"code": "fill_timeout", "message": message, "missing": missing}))
