"""Who each peer is: the route to it, planned from its record, which is looked up through the relay when first needed.

The world a rank receives names no peer (``wire/relay_protocol.py``): a
table of every rank for every rank made the rendezvous send O(N^2) bytes,
and links are lazy, so a rank needs the records of the peers it talks to
only. The first time the linker needs a peer's route (a send to it, or its
PUNCH request), the peer waits while its rank goes out in a LOOKUP on the
relay carrier; the PEERS answer gives its record (listen endpoints, observed
address, probe), from which ``routes.plan_route`` makes the plan, and the
linker goes on. Ranks asked for in the same turn of the progress loop share
one LOOKUP (a collective touching many peers costs one round trip, not one
per peer), and answers are kept: a peer is looked up once.

An engine made without its own record (``me``; tests, a rank without a
rendezvous) plans every peer from ``endpoints`` alone, as before: a plain
connect.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ...wire.relay_protocol import MAX_LOOKUP, Kind, parse_peers
from ..core import Core
from ..peers import Peer
from ..relay_line import RelayLine
from ..routes import PeerAddress, Route, plan_route

Endpoint = tuple[str, int]

# The plan of a peer the rendezvous has no record of: only the relay (or a forced channel's clear failure).
NO_ROUTE = Route(punchable=False)


class Directory:
    """The routes to peers, and their lookups (see the module docstring). Called with the core's lock held
    (``ask_again`` takes it)."""

    def __init__(
        self,
        core: Core,
        me: PeerAddress | None,
        endpoints: Callable[[int], Sequence[Endpoint]] | None,
        want_write: Callable[[RelayLine], None],
        local_addr: Endpoint | None,
    ) -> None:
        self._core = core
        self._me = me
        self._local = local_addr  # the shared port punching runs from (None: no punching)
        self._endpoints = endpoints
        self._want_write = want_write  # (``Sender.want_write``: a LOOKUP the relay socket did not take at once)
        self._routes: dict[int, Route] = {}
        self._asked: set[int] = set()  # looked up, not answered yet
        self._batch: list[int] = []  # to look up in the next LOOKUP frame
        self.missing: dict[int, str] = {}  # rank -> why the rendezvous has no record of it

    def route(self, rank: int) -> Route | None:
        """The route to `rank`; None while its record is not known (``ask`` for it)."""
        route = self._routes.get(rank)
        if route is None and self._me is None:
            assert self._endpoints is not None, "an engine needs its own record or its peers' endpoints"
            route = self._routes[rank] = Route(direct=tuple(self._endpoints(rank)), punch=(), punchable=False)
        return route

    def plan(self, rank: int) -> Route:
        """The route to `rank`, or ``NO_ROUTE`` while its record is not known."""
        return self.route(rank) or NO_ROUTE

    def looked_up(self) -> list[int]:
        """The ranks whose records this rank looked up (the peers it linked to, or tried to)."""
        return sorted(self._routes) if self._me is not None else []

    def steps(self, rank: int, passive: bool = False) -> list[str]:
        """The steps of the plan to `rank` this engine can run (`passive`: of the side asked to punch)."""
        route, channel = self.plan(rank), self._core.options.channel
        return self.usable(rank, route.passive_steps(channel) if passive else route.steps(channel))

    def usable(self, rank: int, steps: list[str]) -> list[str]:
        """Drop steps this engine cannot run: without a relay there is no punch coordination and no relaying."""
        has_relay = self._core.relay is not None
        out = []
        for step in steps:
            if step == "relay" and not has_relay:
                continue
            if step == "punch" and (not has_relay or self._local is None or not self.plan(rank).punch):
                continue
            out.append(step)
        return out

    def why_relayed(self, peer: Peer) -> str:
        """Why this pair goes through the relay, in a few words."""
        if self._core.options.channel == "relay":
            return "FMPI_CHANNEL=relay"
        if self.plan(peer.rank).doomed:
            return "symmetric NAT, neither end public"
        if peer.errors:
            return peer.errors[-1].split(":", 1)[0]  # (the step that failed last, without its details)
        return f"rank {peer.rank} could not link over TCP"

    def ask(self, rank: int) -> None:
        """Look `rank` up (once; the answer comes to ``answer``)."""
        if rank in self._asked:
            return
        self._asked.add(rank)
        self._batch.append(rank)
        if len(self._batch) == 1:
            self._core.loop.call_soon(self._send)

    def ask_again(self) -> None:
        """The relay connection was made again: lookups the old one carried may never be answered."""
        with self._core.lock:
            self._batch = sorted(self._asked)
        self._send()

    def _send(self) -> None:
        """Progress thread: one LOOKUP for the ranks asked for since the last one."""
        core = self._core
        with core.lock:
            batch, self._batch = self._batch, []
            relay = core.relay
            if relay is None:
                return
            for start in range(0, len(batch), MAX_LOOKUP):
                if not relay.send_control(Kind.LOOKUP, {"ranks": batch[start : start + MAX_LOOKUP]}):
                    self._want_write(relay)

    def answer(self, body: dict[str, Any]) -> list[int]:
        """A PEERS answer (progress thread): plan the routes of the ranks it tells of; returns those ranks.
        ProtocolError if it is malformed."""
        records, missing = parse_peers(body)
        assert self._me is not None  # (only an engine with its own record asks)
        learned = []
        for rank, endpoints, observed, probe in records:
            if rank in self._asked:
                self._routes[rank] = plan_route(self._me, PeerAddress(rank, tuple(endpoints), observed, probe))
                learned.append(rank)
        for rank, why in missing.items():
            if rank in self._asked:
                self._routes[rank], self.missing[rank] = NO_ROUTE, why
                learned.append(rank)
        self._asked.difference_update(learned)
        return learned
