"""How to reach each peer: the plan of channels to try, from what the world table says about both ends.

The relay tells every rank, for every rank: the address it listens on (its
*private* endpoint: the interface address and the shared port), the address
the relay saw its connection come from (*observed*: its public endpoint
behind a NAT), and, when the rank is behind a NAT, the address a second relay
port saw (*probe*). From these alone, both ends of a pair compute the same
plan; the kind of NAT each end is behind (none, cone, symmetric, or unknown
when the probe did not answer) is ``wire/nat_kinds.py``'s rule.

Plan steps, tried in order until one yields a link:

``direct``
    plain connect to the peer's private endpoint; only when it is reachable
    as is (the peer is not behind a NAT, or both share one public address:
    same host or same LAN).
``punch``
    TCP simultaneous open from the shared port, coordinated through the
    relay, to the private then the observed endpoint. Skipped when doomed:
    a symmetric NAT on either side and neither end public (the other side's
    SYNs could never match the mapping). When either end's NAT kind is
    unknown, the pair punches for a short while only (``unsure``): a cone
    pair punches in a round trip or two, and a doomed one reaches the relay
    without waiting out the whole punch deadline.
``relay``
    frames forwarded by fmpi-relay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.nat_kinds import NONE, SYMMETRIC, UNKNOWN, nat_kind

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
        return self.nat == NONE

    @property
    def nat(self) -> str:
        return nat_kind(self.endpoints, self.observed, self.probe)


@dataclass(frozen=True)
class Route:
    direct: tuple[Endpoint, ...] = ()
    punch: tuple[Endpoint, ...] = ()
    punchable: bool = True
    notes: tuple[str, ...] = field(default=(), compare=False)
    unsure: bool = False  # a NAT kind of either end is unknown: punch briefly (TransportOptions.unsure_punch_timeout)
    doomed: str = ""  # why punching cannot work ("": it may), for the error of a forced punch

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
    public = me.public or peer.public
    doomed = "" if public else _symmetric(me, peer)
    if doomed:
        notes.append("symmetric NAT, neither end public")
    unsure = not public and not doomed and UNKNOWN in (me.nat, peer.nat)
    if unsure:
        notes.append("NAT kind unknown: a short punch")
    return Route(direct, punch, not doomed, tuple(notes), unsure, doomed)


def _symmetric(me: PeerAddress, peer: PeerAddress) -> str:
    """Who of the pair is behind a symmetric NAT, in words ("": neither)."""
    mine, theirs = me.nat == SYMMETRIC, peer.nat == SYMMETRIC
    if mine and theirs:
        return f"this rank and rank {peer.rank} are behind symmetric NATs"
    if mine:
        return f"this rank is behind a symmetric NAT (rank {peer.rank}: {peer.nat})"
    if theirs:
        return f"rank {peer.rank} is behind a symmetric NAT (this rank: {me.nat})"
    return ""


def plan_routes(me: int, world: dict[int, PeerAddress]) -> dict[int, Route]:
    mine = world[me]
    return {r: plan_route(mine, p) for r, p in world.items() if r != me}
