"""N ranks in one process: real transport engines over loopback, one thread per rank.

Lets the algorithm tests run every algorithm at every N in seconds, without
starting processes: each rank gets its own ``Engine`` (its own listening
socket, links made lazily as in a job) and a ``Channel`` on it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from fmpi.collectives.channel import Channel
from fmpi.transport.engine import Engine


class World:
    def __init__(self, size: int) -> None:
        self.size = size
        secret = os.urandom(16)
        listeners = []
        for _ in range(size):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            listeners.append(sock)
        ports = [s.getsockname()[1] for s in listeners]
        self.engines = [
            Engine(r, size, secret, lambda peer: [("127.0.0.1", ports[peer])], listeners[r]) for r in range(size)
        ]
        self._tag = 0

    def run(self, fn: Callable[[Channel], Any], timeout: float = 60) -> list[Any]:
        """fn(channel) on every rank at once (a fresh tag per call); returns each rank's result."""
        self._tag += 1
        results: list[Any] = [None] * self.size
        errors: list[BaseException | None] = [None] * self.size

        def body(r: int) -> None:
            try:
                results[r] = fn(Channel(self.engines[r], range(self.size), r, 1, self._tag))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors[r] = exc

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
            if t.is_alive():
                raise TimeoutError(f"a rank did not finish within {timeout}s (deadlock?)")
        for r, exc in enumerate(errors):
            if exc is not None:
                raise AssertionError(f"rank {r} failed: {exc!r}") from exc
        return results

    def close(self) -> None:
        for e in self.engines:
            e.abandon()
