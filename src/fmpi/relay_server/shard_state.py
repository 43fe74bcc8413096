"""What one relay keeps of a job whose rendezvous is sharded over several relays: its place, its peers, their records.

A job created with ``"shards": {"index": i, "relays": [[host, port], ...],
"tls": bool}`` is one shard of k: this relay holds the ranks r with
``r % k == i`` (their registrations, records and carrier connections); the
records of the other shards' ranks arrive over the shard links once each
shard is full, so a LOOKUP is answered here whatever rank it names.
``shards.py`` does everything with it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..wire.relay_protocol import parse_endpoint
from .records import Refused

MAX_SHARDS = 64


@dataclass(eq=False)
class ShardState:
    index: int
    relays: list[tuple[str, int]]
    tls: bool = False
    links: dict[int, Any] = field(default_factory=dict)  # shard index -> our outgoing ShardLink to it
    incoming: set[Any] = field(default_factory=set)  # connections of the other shards' links to us
    records: dict[int, dict[str, Any]] = field(default_factory=dict)  # remote rank -> its PEERS record
    full_from: set[int] = field(default_factory=set)  # shards that said every one of their slots is taken
    told_full: bool = False  # we told the others that every one of our slots is taken
    outbox: list[dict[str, Any]] = field(default_factory=list)  # records of ranks that registered, not sent yet
    lost: set[int] = field(default_factory=set)  # remote ranks their shard said are lost
    told: set[tuple[int, int]] = field(default_factory=set)  # (source, dest) told UNDELIVERABLE already
    world: asyncio.Event = field(default_factory=asyncio.Event)  # set once our world is out (or the job is over)

    @property
    def count(self) -> int:
        return len(self.relays)

    def owner(self, rank: int) -> int:
        """The shard that holds `rank`'s registration."""
        return rank % self.count

    def others(self) -> list[int]:
        return [i for i in range(self.count) if i != self.index]

    def quota(self, size: int) -> int:
        """How many of a job of `size` ranks register here."""
        return len(range(self.index, size, self.count))


def parse_shards(raw: Any, job_id: str) -> ShardState:
    """CREATE's optional "shards", checked (Refused "bad_request" with what is wrong)."""
    where = f"CREATE of job {job_id!r}: shards"
    if not isinstance(raw, dict):
        raise Refused("bad_request", f"{where} must be an object with index, relays and tls")
    relays, index = raw.get("relays"), raw.get("index")
    if not isinstance(relays, list) or not 2 <= len(relays) <= MAX_SHARDS:
        raise Refused("bad_request", f"{where}.relays must list 2 to {MAX_SHARDS} [host, port] pairs")
    try:
        addresses = [parse_endpoint(a) for a in relays]
    except Exception:  # noqa: BLE001 - a ProtocolError naming the bad pair
        raise Refused("bad_request", f"{where}.relays must list [host, port] pairs") from None
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(addresses):
        raise Refused("bad_request", f"{where}.index must be this relay's place in relays (0 to {len(addresses) - 1})")
    return ShardState(index, addresses, raw.get("tls") is True)
