"""Hosting a job's shared objects on the relay nodes that do not hold it (what a launcher does)."""

from __future__ import annotations

import math
import socket
import threading
from typing import Any, Callable, Sequence

from ..rendezvous.relay_connection import (
    Aborted,
    RelayConnection,
    RelayError,
    open_with,
)
from ..rendezvous.urls import parse_relay_url
from ..util.retry import retry_until
from ..wire.relay_protocol import Kind, encode
from .client import parse_relay_urls, scheme_of


class DsoHost:
    """Host a job's shared objects on relay nodes that do not hold the job (what a launcher does).

    The relay a job was CREATEd on hosts its objects already; every other
    node gets a DSO_CREATE. The objects live while this host's connections
    are open: ``end()`` (or losing the connection) frees them, ``abort()``
    fails every waiting call. A node that restarts is hosted again as soon
    as it is back (its objects start empty: the ranks' collectives replay
    what they need, see ``dso_collectives``); `on_event` hears about it.
    """

    def __init__(
        self,
        relays: str | Sequence[str],
        job: str,
        token: str,
        *,
        skip: Sequence[str] = (),
        timeout: float = 10.0,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        skipped = {parse_relay_url(s) for s in skip}
        scheme = scheme_of(relays)
        self.job, self._token, self._timeout = job, token, timeout
        self._on_event = on_event or (lambda _message: None)
        self._lock = threading.Lock()
        self._closed = False
        self.conns: dict[str, RelayConnection] = {}
        try:
            for host, port in parse_relay_urls(relays):
                if (host, port) not in skipped:
                    url = f"{scheme}://{host}:{port}"
                    self.conns[url] = self._host(url)
        except BaseException:
            self.close()
            raise
        for url in self.conns:
            threading.Thread(target=self._keep, args=(url,), name="fmpi-dso-host", daemon=True).start()

    def _host(self, url: str) -> RelayConnection:
        return open_with(url, Kind.DSO_CREATE, {"job": self.job, "token": self._token}, self._timeout)

    def _keep(self, url: str) -> None:
        """Follow one node's connection; when the node restarts, host the job there again once it is back."""
        while True:
            with self._lock:
                conn = self.conns.get(url)
            if conn is None:
                return  # closed
            try:
                while True:
                    conn.recv(timeout=None)  # (nothing it sends matters here)
            except Aborted:
                return  # the ranks hear it too; the job is over
            except (RelayError, OSError):
                pass
            if self._closed:
                return
            self._on_event(f"lost relay node {url}; hosting job {self.job} there again when it is back")

            def attempt(url: str = url) -> RelayConnection | None:
                return None if self._closed else self._host(url)

            back = retry_until(attempt, math.inf, 0.1, lambda exc: isinstance(exc, (RelayError, OSError)))
            if back is None:
                return
            with self._lock:
                if self._closed:
                    back.close()
                    return
                self.conns[url] = back
            self._on_event(f"relay node {url} is back and hosts job {self.job} again")

    def _each(self) -> list[RelayConnection]:
        with self._lock:
            return list(self.conns.values())

    def abort(self, reason: str = "aborted", code: int = 1) -> None:
        for conn in self._each():
            try:
                conn.sock.sendall(encode(Kind.ABORT, {"code": code, "reason": reason}))
            except OSError:
                pass

    def end(self) -> None:
        for conn in self._each():
            try:
                conn.sock.sendall(encode(Kind.END, {"job": self.job}))
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self.conns = list(self.conns.values()), {}
        for conn in conns:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # (wakes the thread that follows it)
            except OSError:
                pass
            conn.close()

    def __enter__(self) -> "DsoHost":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()
