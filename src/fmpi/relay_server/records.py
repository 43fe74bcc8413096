"""What fmpi-relay keeps per connection and per job: its connections, a job's members, the job itself.

Plain records; the server (``server.py``, ``jobs.py``, ``dso_serving.py``)
does everything with them.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import dataclass, field
from typing import Any

from ..wire.nat_kinds import NAT_KINDS
from ..wire.relay_protocol import (
    Kind,
    dso_head,
    encode,
    forward_header,
    parse_endpoint,
    parse_endpoints,
    peer_record,
    peers_answer,
)
from .dso.store import Store

log = logging.getLogger("fmpi.relay")


class Refused(Exception):
    """A request the relay answers with ERROR and then closes the connection."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    max_backlog: int
    peer: tuple[str, int] = ("?", 0)

    def _writable(self, what: str) -> bool:
        if self.writer.is_closing():
            return False
        # A client that does not read its frames must not make the relay
        # buffer without bound: drop it instead.
        if self.writer.transport.get_write_buffer_size() > self.max_backlog:
            log.warning("dropping %s:%s: it does not read its %s", *self.peer, what)
            self.writer.transport.abort()
            return False
        return True

    def send(self, kind: Kind, body: dict[str, Any] | None = None) -> None:
        if self._writable("frames"):
            self.writer.write(encode(kind, body))

    def send_encoded(self, frame: bytes) -> None:
        """A frame encoded once for many connections (the WORLD of a large job)."""
        if self._writable("frames"):
            self.writer.write(frame)

    def forward(self, source: int, chunk: memoryview) -> None:
        self.writer.writelines([forward_header(source, len(chunk)), chunk])

    def send_dso(self, request: int, meta: dict[str, Any], payload: bytes | memoryview | None = None) -> None:
        if not self._writable("replies"):
            return
        head = dso_head(Kind.DSO_REPLY, request, meta, len(payload) if payload is not None else 0)
        if payload is not None and len(payload):
            self.writer.writelines([head, payload])
        else:
            self.writer.write(head)

    def backlog(self) -> int:
        return self.writer.transport.get_write_buffer_size()

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


@dataclass(eq=False)
class Member:
    rank: int
    incarnation: str
    conn: Connection
    endpoints: list[tuple[str, int]]
    observed: tuple[str, int]
    probe: tuple[str, int] | None = None
    finished: int | None = None
    left: bool = False  # its connection closed
    told_undeliverable: set[int] = field(default_factory=set)
    last_heard: float = 0.0  # loop time of its last frame
    beats: bool = False  # it said at REGISTER that it sends heartbeats (so silence means trouble)
    silent_for: float | None = None  # set when dropped for silence
    nat: dict[str, str] | None = None  # the NAT it says it is behind: {"kind": ..., "note": why unknown}
    away_since: float | None = None  # loop time its connection broke, while it may still reconnect (reconnect.py)
    # members whose FORWARDs to this one are dropped until their RESYNCED (after it reconnected)
    resync_from: set[int] = field(default_factory=set)
    any_slot: bool = False  # it joined as "any free slot" (a spare): a pinned rank that comes for its slot moves on

    @classmethod
    def registered(cls, conn: Connection, rank: int, body: dict[str, Any], observed: tuple[str, int], now: float) -> "Member":
        """The member a REGISTER body (already checked by ``protocol.decode_body``) makes, heard at loop time `now`."""
        probe = parse_endpoint(body["probe"]) if body.get("probe") is not None else None
        member = cls(rank, body["incarnation"], conn, parse_endpoints(body["endpoints"]), observed, probe)
        member.beats = body.get("heartbeat") is True
        member.last_heard = now
        member.nat = _nat(body.get("nat"))
        return member


def _nat(raw: Any) -> dict[str, str] | None:
    """REGISTER's "nat", if well formed: a kind of ``NAT_KINDS`` and a short note; else None."""
    if not isinstance(raw, dict) or raw.get("kind") not in NAT_KINDS:
        return None
    note = raw.get("note")
    return {"kind": raw["kind"], **({"note": note[:300]} if isinstance(note, str) and note else {})}


@dataclass(eq=False)
class DsoSession:
    """A DSO client connection of a job: its calls still waiting on the server."""

    conn: Connection
    pending: set[asyncio.Future] = field(default_factory=set)


@dataclass(eq=False)
class Resumption:
    """What a job re-created after a relay restart still waits for (see ``resume.py``)."""

    expected: dict[int, str]  # rank -> incarnation, until it rejoins or the rejoin timer gives up on it
    finished: dict[int, int]  # rank -> exit code, of the ranks that finished before the restart
    rejoin_timeout: float
    lost: dict[int, str] = field(default_factory=dict)  # rank -> incarnation, of expected ranks that did not rejoin in time
    # rank -> the (source, chunk) relayed to it before it rejoined, in order
    held: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    held_bytes: dict[int, int] = field(default_factory=dict)
    overflowed: set[int] = field(default_factory=set)  # ranks whose held chunks passed the limit: no more are held
    timer: asyncio.TimerHandle | None = None


@dataclass(eq=False)
class Job:
    id: str
    token: str
    size: int
    created: float
    watcher: Connection
    members: dict[int, Member] = field(default_factory=dict)
    world_published: bool = False
    fill_timer: asyncio.TimerHandle | None = None
    over: bool = False
    aborted: bool = False  # members are going away: no more PEER_LOST notices
    dso_only: bool = False  # created by DSO_CREATE: hosts shared objects, has no rank slots
    dso: Store | None = None  # its shared objects on this relay (made on first use)
    dso_sessions: set[DsoSession] = field(default_factory=set)
    resumed: Resumption | None = None  # re-created by its launcher after this relay restarted
    shard: Any = None  # a ``shard_state.ShardState`` when the job's rendezvous is sharded over several relays
    quota: int = 0  # how many of its ranks register at this relay (all of them, unless sharded)

    def owns(self, rank: int) -> bool:
        """Whether `rank` registers at this relay (always, unless the job is sharded)."""
        return self.shard is None or self.shard.owner(rank) == self.shard.index

    def missing(self) -> list[int]:
        """The slots of this relay not taken yet."""
        if self.shard is None:
            return [r for r in range(self.size) if r not in self.members]
        return [r for r in range(self.shard.index, self.size, self.shard.count) if r not in self.members]

    def free_objects(self, code: str, message: str) -> None:
        """Fail the calls waiting on its shared objects (`code`, `message`) and drop the objects."""
        if self.dso is not None:
            self.dso.close(code, message)
            self.dso = None


def live_job(jobs: dict[str, Job], body: dict[str, Any]) -> Job:
    """The job a REGISTER or DSO_ATTACH names, if it is still on and the token is right."""
    job = jobs.get(body["job"])
    if job is None or job.over:
        raise Refused("unknown_job", f"no job {body['job']!r} on this relay (it ended, or was never created)")
    if not hmac.compare_digest(body["token"].encode(), job.token.encode()):
        raise Refused("auth", f"wrong token for job {job.id!r}")
    return job


def lookup_answer(job: Job, ranks: list[int]) -> dict[str, Any]:
    """The PEERS body answering a member's LOOKUP of `ranks`, from the job's member records."""
    found, missing = [], {}
    remote = job.shard.records if job.shard is not None else {}
    for r in dict.fromkeys(ranks):
        member = job.members.get(r)
        if not 0 <= r < job.size:
            missing[r] = f"rank {r} is outside job {job.id!r} of {job.size} ranks"
        elif r in remote and not job.owns(r):
            found.append(remote[r])  # (another shard's rank: its record came over the shard link)
        elif member is None and not job.owns(r):
            missing[r] = f"no record of rank {r} of job {job.id!r} came from the relay that holds it"
        elif member is None:
            missing[r] = f"rank {r} has not joined job {job.id!r} again since the relay restarted"
        else:
            found.append(peer_record(member.rank, member.endpoints, member.observed, member.probe))
    return peers_answer(found, missing)
