"""Rank bootstrap: join the job at the relay and bring up the transport.

Every rank enters here, whichever backend started it: a local process
(``fmpi.MPI`` calls ``join`` at import, from the environment fmpirun set), a
rank joined by hand, or the Lambda handler (from the invocation event). So the
local backend exercises exactly the code path of the cloud one.

One port per rank. The rank binds one local port with SO_REUSEADDR +
SO_REUSEPORT and uses it for everything: its connection to the relay, its
listener, and every hole-punching attempt. Behind a port-preserving NAT
(Lambda's) the address the relay observes is then exactly where peers must
send their SYNs. A rank behind a NAT also connects from that port to the
relay's probe port: a different observed port means a symmetric NAT, and
its peers skip punching it.

With a ``redis://`` relay, Redis is the rendezvous (``rendezvous/redis``)
and an in-process bridge (``redis_relay/bridge``) stands in for the relay
connection, so the transport runs unchanged.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..natpunch.sockets import bind_reusable, make_listener
from ..rendezvous.redis_connect import is_redis_url
from ..rendezvous.relay_connection import (
    Aborted,
    PeerInfo,
    RelayConnection,
    RelayError,
    observe,
    probe_mapping,
    register,
    route_source_ip,
    wait_world,
)
from ..transport.engine import Engine
from ..transport.options import TransportOptions
from ..transport.requests import TransportError
from ..transport.routes import PeerAddress, plan_routes
from ..wire.relay_protocol import Kind, abort_body
from .spec import RankSpec, SpecError, display_url

if TYPE_CHECKING:
    from ..redis_relay.bridge import RedisBridge


class RankSession:
    """A rank that has joined its job: its transport plus its control line to the relay.

    `relay`: the registered connection to fmpi-relay, or the engine's end of
    a ``RedisBridge`` (which `bridge` then serves); the engine cannot tell.
    """

    def __init__(
        self,
        spec: RankSpec,
        rank: int,
        size: int,
        engine: Engine,
        relay: RelayConnection | socket.socket,
        bridge: "RedisBridge | None" = None,
        registration: "Registration | None" = None,
    ) -> None:
        self.spec = spec
        self.rank = rank
        self.size = size
        self.engine = engine
        self._bridge = bridge
        self._closed = False
        # How this rank registered at fmpi-relay, to register again if the relay restarts (None: Redis).
        self._registration = registration
        self._rejoined = threading.Event()
        self._rejoined.set()  # cleared while the rank waits for a restarted relay
        # Barrier and allreduce done by the relay itself (collectives/server_side.py); connects on first use.
        self.server_collectives = server_collectives(spec)
        if isinstance(relay, RelayConnection):
            engine.attach_relay(relay.sock, self, relay.take_buffer())
        else:
            engine.attach_relay(relay, self)

    def send_to_relay(self, kind: Kind, body: dict) -> None:
        try:
            self.engine.relay_send(kind, body)
        except TransportError as exc:
            raise RelayError(str(exc), "lost") from None

    def finalize(self, exit_code: int = 0) -> None:
        """Clean end: drain the links, tell the relay (with the link statistics), close."""
        if self._closed:
            return
        self.engine.close()
        # A relay that is restarting must hear FINISHED too, or the launcher counts this rank as lost.
        self._rejoined.wait(self.engine.options.relay_rejoin + 5.0)
        self._closed = True
        channel = self.engine.relay
        if channel is None:
            return
        try:
            channel.send_control(Kind.FINISHED, {"code": exit_code, "links": self.engine.link_stats()})
        except OSError:
            pass
        channel.close_gracefully()

    def stop_for_abort(self, reason: str) -> None:
        """Fail every pending operation and stop the progress thread, before telling the relay of an abort:
        the relay echoes the abort to every rank, and this session answers an abort by ending the process."""
        self.engine.fail(TransportError(reason, "ERR_ABORTED"))
        self.engine.abandon()

    def abort(self, code: int, reason: str, cause: dict[str, Any] | None = None) -> None:
        """End the whole job: every rank exits with `code` (`cause`: see ``protocol.abort_cause``)."""
        channel = self.engine.relay
        if channel is not None:
            channel.send_control(Kind.ABORT, abort_body(code, reason, cause))
            channel.drain(2.0)
            if self._bridge is not None:
                # The kernel delivers a TCP socket's last frames after we exit; a
                # bridge thread dies with the process, so let it pass them on first.
                self._bridge.settle(channel.bytes_out, 2.0)
        _exit_now(code)

    # --------------------------------------------- relay events (progress thread)
    def relay_control(self, kind: Kind, body: dict[str, Any]) -> None:
        # The relay sends a rank nothing else after the world but aborts and job failures; either ends it.
        if kind is Kind.ABORT:
            exc = Aborted.from_body(body)
            self.engine.fail(TransportError(str(exc), "ERR_ABORTED"))
            _exit_now(exc.exit_code)
        if kind is Kind.ERROR:
            if self._closed:
                return
            print(f"fmpi: rank {self.rank}: {body.get('message', 'the relay failed the job')}", file=sys.stderr)
            self.engine.fail(TransportError(str(body.get("message", "job failed")), "ERR_RELAY"))
            _exit_now(1)

    def relay_lost(self, error: Exception) -> None:
        if self._closed:
            return
        within = self.engine.options.relay_rejoin
        if self._registration is not None and within > 0:
            # It may be restarting: wait for it (off the progress thread, which keeps the direct links going).
            self._rejoined.clear()
            threading.Thread(target=self._rejoin, args=(error, within), name="fmpi-rejoin", daemon=True).start()
            return
        self._give_up(f"lost the relay at {display_url(self.spec.relay)} ({error})")

    def _give_up(self, why: str) -> None:
        # The launcher's relay is gone: nobody can abort or collect this
        # job any more, so don't linger (and bill) as an orphan.
        print(f"fmpi: rank {self.rank}: {why}; ending", file=sys.stderr)
        self.engine.fail(TransportError(why, "ERR_RELAY"))
        _exit_now(1)

    def _rejoin(self, error: Exception, within: float) -> None:
        """Register again at the restarted relay (the launcher re-creates the job there first)."""
        reg = self._registration
        assert reg is not None
        deadline = time.monotonic() + within
        url = display_url(self.spec.relay)
        print(f"fmpi: rank {self.rank}: lost the relay at {url} ({error}); waiting up to {within:g} s for it", file=sys.stderr)
        while not self._closed:
            try:
                # From a new port: the old connection's (from the shared port) may linger in the kernel.
                relay = RelayConnection(self.spec.relay, timeout=2.0)
            except RelayError:
                relay = None  # not listening (yet)
            if relay is not None:
                try:
                    register(relay, self.spec.job, self.spec.token, self.rank, self.spec.incarnation, [reg.local], 5.0,
                             reg.probe, rejoin_as=reg.observed)
                except (RelayError, OSError) as exc:
                    relay.close()
                    if getattr(exc, "code", "") not in ("unknown_job", "lost", "timeout", "unreachable"):
                        self._give_up(f"the restarted relay at {url} refused this rank: {exc}")
                else:
                    self.engine.replace_relay(relay.sock, relay.take_buffer())
                    self._rejoined.set()
                    print(f"fmpi: rank {self.rank}: rejoined the job at {url}", file=sys.stderr)
                    return
            if time.monotonic() >= deadline:
                self._give_up(f"lost the relay at {url} ({error}), and it did not come back within {within:g} s")
            time.sleep(REJOIN_RETRY)

    def link_event(self, info: dict[str, Any]) -> None:
        # Each link is reported once, by its lower rank (its higher rank says the same).
        if info.get("peer", -1) > self.rank and not self._closed:
            self.send_to_relay(Kind.LINK, info)


@dataclass(frozen=True)
class Registration:
    """What a rank registered with at fmpi-relay: to register the same way at a restarted relay."""

    local: tuple[str, int]  # the shared port (relay connection, listener, punching)
    observed: tuple[str, int]  # where the relay saw it; peers still punch there
    probe: tuple[str, int] | None


# A restarted relay is retried this often (until the launcher has re-created the job there).
REJOIN_RETRY = 0.2


def server_collectives(spec: RankSpec):
    """The provider of server-side collectives for the rank's relay: Redis scripts, or the DSO objects of
    every fmpi-relay node in the URL (``tcp://a:7000,b:7000``: sharded by consistent hashing).

    Made for every rank alike (the table uses it only when the job is
    relayed); nothing connects until a collective uses it.
    """
    if is_redis_url(spec.relay):
        from ..redis_relay.collectives import RedisCollectives

        return RedisCollectives(spec.relay, spec.job)
    from ..dso_client.collectives import DsoCollectives

    return DsoCollectives(spec.relay, spec.job, spec.token)


def _exit_now(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def join(spec: RankSpec, connect_timeout: float = 10.0, options: TransportOptions | None = None) -> RankSession:
    """Register at the relay, wait for the world, and start the transport.

    `options`: transport settings; by default from the FMPI_* environment.
    """
    if options is None:
        try:
            # The spec's channel (fmpirun --channel; a Lambda event has no environment) wins.
            forced: dict[str, Any] = {"channel": spec.channel} if spec.channel else {}
            if spec.rejoin is not None:
                forced["relay_rejoin"] = spec.rejoin
            options = TransportOptions.from_env(connect_timeout=connect_timeout, **forced)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    deadline = time.monotonic() + spec.fill_timeout
    if is_redis_url(spec.relay):
        return _join_redis(spec, options, connect_timeout, deadline)
    # Listen on the interface that reaches the relay: loopback for a local
    # job, the LAN (or function) address when ranks span machines.
    local_ip = route_source_ip(spec.relay)
    shared = bind_reusable(local_ip, 0)
    port = shared.getsockname()[1]
    relay = RelayConnection(spec.relay, timeout=connect_timeout, sock=shared)
    listener = None
    try:
        observed, probe_port = observe(relay, connect_timeout)
        probe = None
        if observed != (local_ip, port) and probe_port is not None:
            probe = probe_mapping(spec.relay, probe_port, bind_reusable(local_ip, port))
        listener = make_listener(local_ip, port)
        rank, size, observed = register(
            relay, spec.job, spec.token, spec.rank, spec.incarnation, [(local_ip, port)], connect_timeout, probe
        )
        registration = Registration((local_ip, port), observed, probe)
        peers = wait_world(relay, deadline)
    except BaseException:
        relay.close()
        if listener is not None:
            listener.close()
        raise
    world = _addresses(peers)
    table = {r: list(a.endpoints) for r, a in world.items()}
    engine = Engine(
        rank, size, spec.token.encode(), lambda r: table[r], listener,
        options=options, routes=plan_routes(rank, world), local_addr=(local_ip, port),
    )
    return RankSession(spec, rank, size, engine, relay, registration=registration)


def _join_redis(spec: RankSpec, options: TransportOptions, connect_timeout: float, deadline: float) -> RankSession:
    """``join`` with Redis as the rendezvous and the relay (see redis_relay/bridge.py)."""
    from ..redis_relay.bridge import RedisBridge
    from ..rendezvous.redis import RedisRank
    from ..rendezvous.redis_connect import source_ip

    local_ip = source_ip(spec.relay)
    # The shared port, as with fmpi-relay: the registration connection is made
    # from it, so the address Redis sees is the one peers punch to.
    shared = bind_reusable(local_ip, 0)
    port = shared.getsockname()[1]
    listener = member = None
    try:
        member = RedisRank(spec.relay, spec.job, spec.token, source=(local_ip, port))
        listener = make_listener(local_ip, port)
        rank, size = member.register(spec.rank, spec.incarnation, [(local_ip, port)])
        peers = member.wait_world(deadline)
    except BaseException:
        if member is not None:
            for client in member.hand_over():
                client.close()
        if listener is not None:
            listener.close()
        raise
    finally:
        shared.close()
    world = _addresses(peers)
    table = {r: list(a.endpoints) for r, a in world.items()}
    engine = Engine(
        rank, size, spec.token.encode(), lambda r: table[r], listener,
        options=options, routes=plan_routes(rank, world), local_addr=(local_ip, port),
    )
    bridge = RedisBridge(member)
    bridge.start()
    return RankSession(spec, rank, size, engine, bridge.engine_end, bridge)


def _addresses(peers: list[PeerInfo]) -> dict[int, PeerAddress]:
    return {
        p.rank: PeerAddress(p.rank, tuple(tuple(e) for e in p.endpoints), tuple(p.observed), p.probe)  # type: ignore[arg-type]
        for p in peers
    }
