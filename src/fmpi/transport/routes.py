"""How to reach each peer: the plan of channels to try, from what the world table says about both ends.

The relay tells every rank, for every rank: the address it listens on (its
*private* endpoint: the interface address and the shared port), the address
the relay saw its connection come from (*observed*: its public endpoint
behind a NAT), and, when the rank is behind a NAT, the address a second relay
port saw (*probe*). From these alone, both ends of a pair compute the same
plan:

* ``none``: observed == private, nobody translates (a local job, a public host);
* ``cone``: translated, and the same public port towards both relay ports
  (endpoint-independent mapping: the observed endpoint works for everyone);
* ``symmetric``: a different public port per destination, so the endpoint
  the relay saw is useless to other peers.

Plan steps, tried in order until one yields a link:

``direct``
    plain connect to the peer's private endpoint; only when it is reachable
    as is (the peer is not behind a NAT, or both share one public address:
    same host or same LAN).
``punch``
    TCP simultaneous open from the shared port, coordinated through the
    relay, to the private then the observed endpoint. Skipped when doomed:
    a symmetric NAT on either side and neither end public (the other side's
    SYNs could never match the mapping).
``relay``
    frames forwarded by fmpi-relay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Endpoint = tuple[str, int]


@dataclass(frozen=True)
class PeerAddress:
    """What the world table says about one rank."""

    rank: int
    endpoints: tuple[Endpoint, ...]
    observed: Endpoint
    probe: Endpoint | None = None

    @property
    def public(self) -> bool:
        return self.observed in self.endpoints

    @property
    def nat(self) -> str:
        if self.public:
            return "none"
        if self.probe is not None and self.probe != self.observed:
            return "symmetric"
        return "cone"


@dataclass(frozen=True)
class Route:
    direct: tuple[Endpoint, ...] = ()
    punch: tuple[Endpoint, ...] = ()
    punchable: bool = True
    notes: tuple[str, ...] = field(default=(), compare=False)

    def steps(self, channel: str) -> list[str]:
        """The steps of an active link set-up under a forced or automatic channel choice."""
        if channel == "relay":
            return ["relay"]
        if channel == "direct":
            return ["direct"]
        if channel == "punch":
            return ["punch"]
        steps = []
        if self.direct:
            steps.append("direct")
        if self.punch and self.punchable:
            steps.append("punch")
        steps.append("relay")
        return steps

    def passive_steps(self, channel: str) -> list[str]:
        """The steps of the side asked to punch by its peer."""
        if channel == "relay":
            return ["relay"]
        if channel == "punch":
            return ["punch"]
        if channel == "direct":
            return []
        return (["punch"] if self.punch else []) + ["relay"]


def plan_route(me: PeerAddress, peer: PeerAddress) -> Route:
    """The route from `me` to `peer`; symmetric in what it decides about punching."""
    direct: tuple[Endpoint, ...] = ()
    notes = []
    if peer.public:
        direct = peer.endpoints
        notes.append("peer is not behind a NAT")
    elif me.observed[0] == peer.observed[0]:
        direct = peer.endpoints
        notes.append("same public address (same host or LAN)")
    punch = tuple(dict.fromkeys([*peer.endpoints, peer.observed]))
    symmetric = "symmetric" in (me.nat, peer.nat)
    punchable = not symmetric or me.public or peer.public
    if not punchable:
        notes.append("symmetric NAT and neither end public: punching cannot work")
    return Route(direct, punch, punchable, tuple(notes))


def plan_routes(me: int, world: dict[int, PeerAddress]) -> dict[int, Route]:
    mine = world[me]
    return {r: plan_route(mine, p) for r, p in world.items() if r != me}
