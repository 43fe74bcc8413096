"""Notice, without reading from them, that relay nodes closed DSO connections.

A node that restarts closes every connection it had. A rank that is talking
to that node at the moment finds out by itself; one that is not must still
find out at once, because ranks that are may be waiting on what it replays
to the node (``dso_collectives``). One daemon thread polls the connections
for a hang-up only (POLLRDHUP: the peer closed; never for data, which the
calling threads read), so it sleeps until a node actually goes away.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Callable

from .node_connection import NodeConnection, SharedObjectError


class HangupWatch:
    """Call `on_hangup(key, connection)` when a live connection of `connections()` is closed by its node."""

    def __init__(
        self,
        connections: Callable[[], dict[str, NodeConnection]],
        on_hangup: Callable[[str, NodeConnection], None],
    ) -> None:
        self._connections = connections
        self._on_hangup = on_hangup
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="fmpi-dso-hangups", daemon=True)
        self._thread.start()

    def changed(self) -> None:
        """The set of connections changed: look again."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass  # closed

    def close(self) -> None:
        self._closed = True
        self.changed()
        self._thread.join(5)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    def _run(self) -> None:
        while not self._closed:
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            watched = {}
            for key, conn in self._connections().items():
                if conn.dead is None:
                    watched[conn.sock.fileno()] = (key, conn)
                    poller.register(conn.sock, select.POLLRDHUP)
            for fd, _events in poller.poll():
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                elif fd in watched and not self._closed:
                    key, conn = watched[fd]
                    self._on_hangup(key, conn)
                    if conn.dead is None:  # (not to poll a closed connection again)
                        conn.fail(SharedObjectError("the relay node closed the connection", "lost", conn.url))
