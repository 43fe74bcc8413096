"""Rank bootstrap: join the job at the relay and bring up the transport.

Every rank enters here, whichever backend started it: a local process
(``fmpi.MPI`` calls ``join`` at import, from the environment fmpirun set), a
rank joined by hand, or the Lambda handler (from the invocation event). So the
local backend exercises exactly the code path of the cloud one.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from ..relay.client import Aborted, PeerInfo, RelayConnection, RelayError, register, wait_world
from ..relay.protocol import Kind
from ..transport.engine import Engine
from ..transport.requests import TransportError
from .rankspec import RankSpec


class RankSession:
    """A rank that has joined its job: its transport plus its control line to the relay."""

    def __init__(self, spec: RankSpec, rank: int, size: int, engine: Engine, relay: RelayConnection) -> None:
        self.spec = spec
        self.rank = rank
        self.size = size
        self.engine = engine
        self._relay = relay
        self._relay_lock = threading.Lock()
        self._closed = False
        engine.watch(relay.sock, self._on_relay_readable)

    def send_to_relay(self, kind: Kind, body: dict) -> None:
        with self._relay_lock:
            self._relay.send(kind, body)

    def finalize(self, exit_code: int = 0) -> None:
        """Clean end: drain the links, tell the relay, close."""
        if self._closed:
            return
        self._closed = True
        self.engine.close()
        try:
            self.send_to_relay(Kind.FINISHED, {"code": exit_code})
        except RelayError:
            pass  # the relay is gone; nothing left to tell
        self._relay.close()

    def abort(self, code: int, reason: str) -> None:
        """End the whole job: every rank exits with `code`."""
        try:
            self.send_to_relay(Kind.ABORT, {"code": code, "reason": reason})
        except RelayError:
            pass
        _exit_now(code)

    def _on_relay_readable(self) -> None:
        # Runs on the progress thread. The relay sends a rank nothing after the
        # world except aborts and job failures; either ends this rank.
        try:
            self._relay.recv(timeout=5.0)
        except socket.timeout:
            return
        except Aborted as exc:
            self.engine.fail(TransportError(str(exc), "ERR_ABORTED"))
            _exit_now(exc.exit_code)
        except RelayError as exc:
            if self._closed:
                return
            if exc.code == "lost":
                # The launcher's relay is gone: nobody can abort or collect this
                # job any more, so don't linger (and bill) as an orphan.
                print(f"fmpi: rank {self.rank}: lost the relay at {self.spec.relay}; ending", file=sys.stderr)
            else:
                print(f"fmpi: rank {self.rank}: {exc}", file=sys.stderr)
            self.engine.fail(TransportError(str(exc), "ERR_RELAY"))
            _exit_now(1)


def _exit_now(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def join(spec: RankSpec, connect_timeout: float = 10.0) -> RankSession:
    """Register at the relay, wait for the world, and start the transport."""
    deadline = time.monotonic() + spec.fill_timeout
    relay = RelayConnection(spec.relay, timeout=connect_timeout)
    try:
        # Listen on the interface that reaches the relay: loopback for a local
        # job, the LAN address when ranks span machines.
        local_ip = relay.sock.getsockname()[0]
        listener = socket.create_server((local_ip, 0), backlog=128)
        port = listener.getsockname()[1]
        rank, size, observed = register(relay, spec.job, spec.token, spec.rank, spec.incarnation, [(local_ip, port)], connect_timeout)
        peers = wait_world(relay, deadline)
    except BaseException:
        relay.close()
        raise
    table = _endpoint_table(peers)
    engine = Engine(rank, size, spec.token.encode(), lambda r: table[r], listener, connect_timeout=connect_timeout)
    return RankSession(spec, rank, size, engine, relay)


def _endpoint_table(peers: list[PeerInfo]) -> dict[int, list[tuple[str, int]]]:
    """Where to reach each rank: its own listening addresses, then its public ip with the same port."""
    table = {}
    for p in peers:
        candidates = list(p.endpoints)
        for _, port in p.endpoints:
            public = (p.observed[0], port)
            if public not in candidates:
                candidates.append(public)
        table[p.rank] = candidates
    return table
