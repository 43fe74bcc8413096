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

Which service is the rendezvous (fmpi-relay, Redis, an in-process store)
is the URL's business: ``rendezvous.connect`` picks the backend, and after
the world it hands over the rank's line to the service (a socket speaking
the relay protocol, or Redis's own line), which the transport uses through
one interface (``transport/relay_line.py``), whatever the backend. The world is the
job's size only: the transport looks up the peers it links to through that
carrier (LOOKUP), so no rank receives a table of every peer.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from .. import rendezvous
from ..natpunch.sockets import bind_reusable, make_listener
from ..rendezvous.protocols import Carrier, Registered, Rendezvous
from ..rendezvous.relay_connection import Aborted, RelayError
from ..rendezvous.urls import REDIS, display_url, parse
from ..transport.engine import Engine
from ..transport.options import TransportOptions
from ..transport.relay_channel import RelayChannel
from ..transport.relay_line import RelayLine
from ..transport.requests import TransportError
from ..transport.routes import PeerAddress
from ..util.retry import retry_until
from ..wire.relay_protocol import Kind, abort_body
from .spec import RankSpec, SpecError


class RankSession:
    """A rank that has joined its job: its transport plus its control line to the relay.

    `carrier`: what the rendezvous handed over after the world (the
    registered connection to fmpi-relay, or the Redis line); the engine
    sees one ``RelayLine`` either way.
    """

    def __init__(
        self,
        spec: RankSpec,
        rank: int,
        size: int,
        engine: Engine,
        carrier: Carrier,
        rendezvous: Rendezvous | None = None,
        registration: Registered | None = None,
    ) -> None:
        self.spec = spec
        self.rank = rank
        self.size = size
        self.engine = engine
        self._closed = False
        # How this rank registered, to register again if the relay restarts.
        self._rendezvous = rendezvous
        self._registration = registration
        self._rejoined = threading.Event()
        self._rejoined.set()  # cleared while the rank waits for a restarted relay
        # Barrier and allreduce done by the relay itself (collectives/server_side.py); connects on first use.
        self.server_collectives = server_collectives(spec)
        engine.attach_relay(relay_line(carrier, engine.options), self)

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
        # A relay that is restarting (or a connection being made again) must hear FINISHED too, or the launcher
        # counts this rank as lost.
        options = self.engine.options
        self._rejoined.wait((options.relay_rejoin or options.heartbeat_timeout) + 5.0)
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
            channel.drain(2.0)  # (an in-process line dies with the process: let it pass the abort on first)
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
        if self._rendezvous is not None and self._rendezvous.can_rejoin:
            # Only the connection may be lost, or the relay may be restarting: connect again (off the progress
            # thread, which keeps the direct links going).
            self._rejoined.clear()
            threading.Thread(target=self._rejoin, args=(error,), name="fmpi-rejoin", daemon=True).start()
            return
        self._give_up(f"lost the relay at {display_url(self.spec.relay)} ({error})")

    def _give_up(self, why: str) -> None:
        # The launcher's relay is gone: nobody can abort or collect this
        # job any more, so don't linger (and bill) as an orphan.
        print(f"fmpi: rank {self.rank}: {why}; ending", file=sys.stderr)
        self.engine.fail(TransportError(why, "ERR_RELAY"))
        _exit_now(1)

    def _rejoin(self, error: Exception) -> None:
        """Register again on a new connection: at the same relay, if only the connection broke (it keeps the slot
        for a short grace), or at the restarted relay (once the launcher has created the job there again), for up
        to FMPI_RELAY_REJOIN. 0: the relay cannot restart (it runs in fmpirun), so one that does not answer is gone;
        one that answers still takes the rank back, for up to the heartbeat timeout."""
        assert self._rendezvous is not None and self._registration is not None
        reg, again = self._registration, self._rendezvous.rejoin
        url = display_url(self.spec.relay)
        restart = self.engine.options.relay_rejoin
        within = restart or self.engine.options.heartbeat_timeout
        print(f"fmpi: rank {self.rank}: lost its connection to the relay at {url} ({error}); reconnecting "
              f"(for up to {within:g} s)", file=sys.stderr)
        started = time.monotonic()

        def not_back(exc: Exception) -> bool:
            code = getattr(exc, "code", "")
            return isinstance(exc, (RelayError, OSError)) and code in NOT_BACK and (restart > 0 or code != "unreachable")

        def attempt() -> Carrier | None:
            return None if self._closed else again(reg, 5.0)

        try:
            carrier = retry_until(attempt, started + within, REJOIN_RETRY, not_back)
        except (RelayError, OSError) as exc:
            if getattr(exc, "code", "") not in NOT_BACK:
                self._give_up(f"the relay at {url} refused this rank's reconnection: {exc}")
            elif restart == 0:
                self._give_up(f"lost the relay at {url} ({error}), and could not reconnect: {exc}")
            else:
                self._give_up(f"lost the relay at {url} ({error}), and it did not come back within {within:g} s "
                              f"(the last try: {exc})")
            return
        if carrier is None or self._closed:
            return
        self.engine.replace_relay(relay_line(carrier, self.engine.options))
        self._rejoined.set()
        took = time.monotonic() - started
        if carrier.reconnected:
            print(f"fmpi: rank {self.rank}: reconnected to the relay at {url} in {took:.3f} s (the relay had stayed up)",
                  file=sys.stderr)
        else:
            print(f"fmpi: rank {self.rank}: rejoined the job at {url} (the relay had restarted)", file=sys.stderr)

    def link_event(self, info: dict[str, Any]) -> None:
        # Each link is reported once, by its lower rank (its higher rank says the same).
        if info.get("peer", -1) > self.rank and not self._closed:
            self.send_to_relay(Kind.LINK, info)


# A restarted relay is retried this often (until the launcher has re-created the job there).
REJOIN_RETRY = 0.2
# What a relay that is not (fully) back answers: try again.
NOT_BACK = ("unknown_job", "lost", "timeout", "unreachable")


def server_collectives(spec: RankSpec):
    """The provider of server-side collectives for the rank's relay: Redis scripts, or the DSO objects of
    every fmpi-relay node in the URL (``tcp://a:7000,b:7000``: sharded by consistent hashing).

    Made for every rank alike (the table uses it only when the job is
    relayed); nothing connects until a collective uses it.
    """
    if parse(spec.relay).kind == REDIS:
        from ..redis_relay.collectives import RedisCollectives

        return RedisCollectives(spec.relay, spec.job, spec.token)
    from ..dso_client.collectives import DsoCollectives

    return DsoCollectives(spec.relay, spec.job, spec.token)


def relay_line(carrier: Carrier, options: TransportOptions) -> RelayLine:
    """The transport's line to the service the rendezvous handed over: its own, or the relay protocol on a socket."""
    if carrier.line is not None:
        return carrier.line
    assert carrier.sock is not None
    return RelayChannel(carrier.sock, leftover=carrier.pending, chunk=options.relay_chunk)


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
    meeting = rendezvous.connect(spec.relay, spec.job, spec.token, spec.rank, spec.sharded, spec.incarnation)
    # Listen on the interface that reaches the relay: loopback for a local
    # job, the LAN (or function) address when ranks span machines.
    local_ip = meeting.local_ip()
    shared = bind_reusable(local_ip, 0)
    port = shared.getsockname()[1]
    listener = None
    try:
        meeting.open(shared, connect_timeout)
        listener = make_listener(local_ip, port)
        registered = meeting.register(spec.rank, spec.incarnation, connect_timeout)
        meeting.wait_world(deadline)
        carrier = meeting.carrier()
    except BaseException:
        meeting.close()
        if listener is not None:
            listener.close()
        raise
    # The world names no peer: the engine looks up the records of those it links to, through the carrier.
    me = PeerAddress(registered.rank, (registered.local,), registered.observed, registered.probe)
    engine = Engine(
        registered.rank, registered.size, spec.token.encode(), None, listener,
        options=options, me=me, local_addr=(local_ip, port),
    )
    return RankSession(spec, registered.rank, registered.size, engine, carrier, meeting, registered)

