"""A member whose connection broke while this relay stayed up: away for a while, then back on a new connection.

Why: one lost socket (a NAT gateway that forgot its mapping, a reset from a
middlebox, ``ss -K``) must not end a healthy job. When a member's connection
breaks with an error after the world is out (a reset, not the end of file a
process that exits sends, and not a drop for silence), the member is *away*:
it stays in the job, nobody is told it is lost, and FORWARD chunks to it are
dropped (its peers resend them once it is back). The rank connects again and
REGISTERs with ``"resume": true``, its token and its incarnation; it gets its
slot back (``_reconnect``), also when this relay has not yet noticed the old
connection break (that connection is then cut).

How long it may take: ``reconnect_grace`` (2 s by default) from the break;
the heartbeat watcher (``jobs.py``) counts a member away longer as lost, and
its peers hear PEER_LOST at once. A live rank is back within milliseconds (it
sees the same reset, or its next heartbeat does); a process that died with
bytes unread in its socket also ends in a reset, and is named within the
grace instead of at once. A rank the relay has not seen break is judged by
the heartbeat rule as ever.

Relayed streams start over. Chunks in flight when the connection broke are
lost both ways, and a relayed rank frame may have been cut in its middle. So
after a reconnect every other member gets PEER_BACK: it resets its reader of
that rank's stream, answers RESYNCED (its FORWARDs to that rank start at a
frame boundary from there on) and sends RESUME again, as after a relay
restart. Until a member's RESYNCED, its chunks to the reconnected rank are
dropped: they may continue a frame whose start the rank never got.

A mixin of ``RelayServer`` through ``jobs.JobLifecycle``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Callable

from ..wire.relay_protocol import Kind
from .records import Connection, Job, Member, Refused

log = logging.getLogger("fmpi.relay")


class Reconnection:
    """Members away and back (see the module docstring)."""

    heartbeat_timeout: float
    reconnect_grace: float
    _notify_lost: Callable[[Job, int], None]  # (jobs.JobLifecycle)
    _shard_back: Callable[[Job, Member], None]  # (shards.ShardRelaying)
    _shard_send: Callable[[Job, int, dict[str, Any]], None]

    def _went_away(self, job: Job, member: Member) -> None:
        """`member`'s connection broke with an error: wait ``reconnect_grace`` for it to reconnect."""
        member.away_since = asyncio.get_running_loop().time()
        job.watcher.send(Kind.EVENT, {"type": "away", "rank": member.rank, "within": self.reconnect_grace})
        log.info("job %s: rank %d lost its connection; it may reconnect", job.id, member.rank)

    def _away_expired(self, job: Job, member: Member, now: float) -> None:
        """An away member did not reconnect within the grace: it is lost (launcher: "lost", the others PEER_LOST at
        once: the launcher had the time to name a process that died)."""
        assert member.away_since is not None
        member.left = True
        away = now - member.away_since
        log.warning("job %s: rank %d did not reconnect within %.1f s; it is lost", job.id, member.rank, away)
        job.watcher.send(Kind.EVENT, {"type": "lost", "rank": member.rank, "away": round(away, 1)})
        self._notify_lost(job, member.rank)

    def _reconnect(self, conn: Connection, job: Job, body: dict[str, Any], old: Member) -> Member:
        """A REGISTER with resume from a member of this job: give it its slot back on `conn` (or refuse, saying why)."""
        rank, incarnation = old.rank, body["incarnation"]
        if job.aborted:
            raise Refused("aborted", f"job {job.id!r} was aborted")
        if incarnation != old.incarnation:
            raise Refused(
                "duplicate",
                f"rank {rank} of job {job.id!r} is incarnation {old.incarnation!r}, not {incarnation!r}: "
                "another process for the same rank is refused",
            )
        if old.finished is not None:
            raise Refused("finished", f"rank {rank} of job {job.id!r} has finished (exit code {old.finished})")
        if old.left:
            raise Refused(
                "gone",
                f"rank {rank} of job {job.id!r} was counted as lost (it did not reconnect within "
                f"{self.reconnect_grace:g} s, or it was silent for {self.heartbeat_timeout:g} s); it cannot take its slot back",
            )
        now = asyncio.get_running_loop().time()
        away = None if old.away_since is None else now - old.away_since
        others = [m for m in job.members.values() if m.rank != rank and not m.left and m.away_since is None]
        member = dataclasses.replace(
            old, conn=conn, last_heard=now, away_since=None, silent_for=None, beats=body.get("heartbeat") is True,
            told_undeliverable=set(), resync_from={m.rank for m in others},
        )
        job.members[rank] = member
        old.conn.writer.transport.abort()  # (what it may still carry is stale; its handler sees it was replaced)
        conn.send(Kind.REGISTERED, {"rank": rank, "size": job.size, "observed": list(old.observed), "reconnected": True})
        if member.beats:
            conn.send(Kind.HEARTBEAT, {})  # at once, as at a first REGISTER
        for m in others:
            m.conn.send(Kind.PEER_BACK, {"rank": rank})
        for m in job.members.values():
            if m.left and m.finished is None:
                conn.send(Kind.PEER_LOST, {"rank": m.rank})  # (it may have been away when they were lost)
        if job.shard is not None:
            self._shard_back(job, member)  # (and the same with the ranks of the job's other relays)
        event: dict[str, Any] = {"type": "rejoined", "rank": rank, "reconnected": True}
        if away is not None:
            event["away"] = round(away, 3)
        job.watcher.send(Kind.EVENT, event)
        log.info("job %s: rank %d reconnected", job.id, rank)
        return member

    def _resynced(self, job: Job, member: Member, body: dict[str, Any]) -> None:
        """`member` answered PEER_BACK: its FORWARDs to that rank flow again."""
        rank = body["rank"]
        target = job.members.get(rank)
        if target is not None:
            target.resync_from.discard(member.rank)
        elif job.shard is not None and 0 <= rank < job.size and not job.owns(rank):
            self._shard_send(job, job.shard.owner(rank), {"type": "resynced", "rank": rank, "by": member.rank})

    @staticmethod
    def _stale(job: Job, sender: Member, target: Member | None) -> bool:
        """Whether a FORWARD from `sender` to `target` belongs to a stream that broke and starts over (dropped)."""
        if job.members.get(sender.rank) is not sender:
            return True  # (a connection a reconnect replaced)
        if target is None or target.finished is not None or target.left:
            return False  # (UNDELIVERABLE, saying why)
        # A connection closing is not news yet: whether its rank is away or lost is decided when its handler ends.
        return target.away_since is not None or sender.rank in target.resync_from or target.conn.writer.is_closing()
