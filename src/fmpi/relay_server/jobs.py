"""The life of a relay's jobs: create, register ranks, publish the world, abort, fail, end; lost ranks and heartbeats.

A mixin of ``RelayServer`` (``server.py``), which reads the frames and calls
these; here is what each request or loss does to the job and who is told.
A job re-created after this relay restarted (CREATE with ``resume``) takes
its ranks back as they rejoin: ``resume.py``; a member whose connection broke
while the relay stayed up is away for a while and may reconnect: ``reconnect.py``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ..util.ranges import describe_ranks
from ..wire.relay_protocol import Kind, abort_body, abort_cause, encode, lookup_ranks
from .records import (
    Connection,
    Job,
    Member,
    Refused,
    live_job,
    lookup_answer,
)
from .names import NameServing
from .reconnect import Reconnection
from .resume import JobResumption, parse_resume, wants_rejoin
from .shards import ShardRelaying

log = logging.getLogger("fmpi.relay")

LINK_KINDS = ("direct", "punched", "relayed")


class JobLifecycle(JobResumption, Reconnection, ShardRelaying, NameServing):
    """The jobs of a relay and what happens to them (see the module docstring)."""

    jobs: dict[str, Job]
    max_jobs: int
    max_job_size: int
    lost_notice_delay: float
    heartbeat_timeout: float
    reconnect_grace: float

    def _create(self, conn: Connection, body: dict[str, Any], dso_only: bool = False) -> Job:
        job_id, size = body["job"], 0 if dso_only else body["size"]
        if not 0 < len(job_id) <= 128:
            raise Refused("bad_request", "job id must be 1 to 128 characters")
        if not dso_only and not 1 <= size <= self.max_job_size:
            raise Refused("bad_request", f"job size must be 1 to {self.max_job_size}, not {size}")
        if len(body["token"]) < 16:
            raise Refused("bad_request", "job token must be at least 16 characters")
        if job_id in self.jobs:
            raise Refused("job_exists", f"job {job_id!r} already exists on this relay")
        if len(self.jobs) >= self.max_jobs:
            raise Refused("limit", f"this relay already holds {self.max_jobs} jobs")
        raw_resume = None if dso_only else body.get("resume")
        resume = parse_resume(raw_resume, job_id, size) if raw_resume is not None else None
        job = Job(job_id, body["token"], size, time.monotonic(), conn, dso_only=dso_only, quota=size)
        if not dso_only and body.get("shards") is not None:
            if resume is not None:
                raise Refused("bad_request", f"job {job_id!r} is sharded over several relays: it cannot resume")
            self._shard_setup(job, body["shards"])
            self._shard_open(job)
        self.jobs[job_id] = job
        if dso_only:
            conn.send(Kind.CREATED, {"job": job_id, "dso_only": True})
            log.info("job %s created (shared objects only)", job_id)
            return job
        if resume is not None:
            self._resume_job(job, resume)
            return job
        fill_timeout = float(body["fill_timeout"])
        job.fill_timer = asyncio.get_running_loop().call_later(fill_timeout, self._fill_expired, job, fill_timeout)
        conn.send(Kind.CREATED, {"job": job_id})
        log.info("job %s created (%d ranks%s)", job_id, size,
                 f"; shard {job.shard.index} of {job.shard.count}, {job.quota} ranks here" if job.shard else "")
        if job.shard is not None:
            self._filled(job)  # (a shard holding none of the job's ranks is full at once)
        return job

    def _register(self, conn: Connection, body: dict[str, Any]) -> tuple[Job, Member]:
        job = live_job(self.jobs, body)
        if job.dso_only:
            raise Refused("unknown_job", f"job {job.id!r} only has shared objects on this relay; ranks register at its rendezvous relay")
        if wants_rejoin(body):
            member = job.members.get(body["rank"])
            if member is not None and job.world_published:
                return job, self._reconnect(conn, job, body, member)  # (its connection broke; this relay stayed up)
            return job, self._rejoin(conn, job, body)
        if job.resumed is not None:
            raise Refused(
                "duplicate",
                f"the world of job {job.id!r} is already complete (the job resumed after a relay restart); "
                "only its live ranks may register again, with resume",
            )
        rank = body["rank"]
        any_slot = rank == -1
        if any_slot:  # "any free slot": ranks joined by hand, and spare Lambda ranks, need not pick one
            _joined_once(job, body["incarnation"])
            missing = job.missing()
            if not missing:
                raise _full(job)
            rank = missing[0]
        if not 0 <= rank < job.size:
            raise Refused("bad_rank", f"rank {rank} is outside job {job.id!r} of {job.size} ranks")
        if not job.owns(rank):
            raise Refused("wrong_shard", f"rank {rank} of job {job.id!r} registers at relay {job.shard.owner(rank)} of "
                                         f"{job.shard.count} (rank mod {job.shard.count}), not at this one")
        if rank in job.members and job.members[rank].any_slot and job.shard is not None and not job.missing():
            raise _full(job)  # (a spare holds this slot, and no other is free here: the rank tries another relay)
        if rank in job.members and job.members[rank].any_slot and job.missing():
            # A spare (or a rank moved before) that started first holds this rank's slot: it takes a free one,
            # and holds that one as a spare does (the rank it belongs to moves on in turn). One invocation
            # delivered twice still joins once: the second delivery is refused, not moved to another slot.
            _joined_once(job, body["incarnation"])
            rank, any_slot = job.missing()[0], True
        if rank in job.members:
            other = job.members[rank]
            raise Refused(
                "duplicate",
                f"rank {rank} of job {job.id!r} is already registered (incarnation {other.incarnation!r}); "
                f"this duplicate (incarnation {body['incarnation']!r}) is refused",
            )
        member = Member.registered(conn, rank, body, conn.peer, asyncio.get_running_loop().time())
        member.any_slot = any_slot
        job.members[rank] = member
        conn.send(Kind.REGISTERED, {"rank": rank, "size": job.size, "observed": list(conn.peer)})
        # The incarnation lets the launcher re-create the job (resume) if this relay restarts.
        event = {"type": "joined", "rank": rank, "joined": len(job.members), "size": job.size, "incarnation": member.incarnation,
                 **({"nat": member.nat} if member.nat else {})}
        job.watcher.send(Kind.EVENT, event)
        self._filled(job, member)
        return job, member

    def _dispatch(self, job: Job, role: Job | Member, kind: Kind, body: dict[str, Any]) -> None:
        if kind is Kind.ABORT:
            origin = role.rank if isinstance(role, Member) else None
            self._abort(job, body["code"], body["reason"], origin, abort_cause(body.get("cause")))
        elif isinstance(role, Member) and kind is Kind.OUTPUT:
            job.watcher.send(Kind.EVENT, {"type": "output", "rank": role.rank, "stream": body["stream"], "data": body["data"]})
        elif isinstance(role, Member) and kind is Kind.FINISHED:
            role.finished = body["code"]
            event = {"type": "finished", "rank": role.rank, "code": role.finished}
            links = _link_reports(body.get("links"), job.size)
            if links is not None:
                event["links"] = links
            job.watcher.send(Kind.EVENT, event)
        elif isinstance(role, Member) and kind is Kind.LOOKUP:
            if not job.world_published:
                raise Refused("protocol", "LOOKUP is for members of a job whose world is published")
            role.conn.send(Kind.PEERS, lookup_answer(job, lookup_ranks(body)))
        elif isinstance(role, Member) and kind is Kind.RESYNCED:
            self._resynced(job, role, body)
        elif isinstance(role, Member) and kind is Kind.LINK:
            if body["kind"] in LINK_KINDS:
                event = {"type": "link", "rank": role.rank, "peer": body["peer"], "kind": body["kind"],
                         "seconds": body["seconds"], "event": str(body.get("event", "up"))[:16],
                         "shared_memory": body.get("shared_memory") is True,
                         **({"why": body["why"][:200]} if isinstance(body.get("why"), str) else {})}
                job.watcher.send(Kind.EVENT, event)
        elif isinstance(role, Job) and kind is Kind.END:
            self._end_job(job)
        else:
            raise Refused("protocol", f"{kind.name} is not a valid request here")

    def _publish_world(self, job: Job) -> None:
        job.world_published = True
        if job.fill_timer is not None:
            job.fill_timer.cancel()
        # The size only: each rank looks up the peers it links to (LOOKUP), so the relay sends O(N) bytes in all.
        world = encode(Kind.WORLD, {"size": job.size})
        beat = encode(Kind.HEARTBEAT, {})
        now = asyncio.get_running_loop().time()
        for m in job.members.values():
            # A rank beats once its world is out: the time it waited for the last rank to join is not silence.
            m.last_heard = now
            m.conn.send_encoded(world)
            if m.beats:
                m.conn.send_encoded(beat)  # at once: the rank then knows this relay beats
        job.watcher.send(Kind.EVENT, {"type": "world", "seconds": round(time.monotonic() - job.created, 6)})
        here = f" ({len(job.members)} registered here, relay {job.shard.index} of {job.shard.count})" if job.shard else ""
        log.info("job %s: world of %d ranks published%s", job.id, job.size, here)

    def _fill_expired(self, job: Job, fill_timeout: float) -> None:
        if job.world_published or job.over:
            return
        missing = job.missing()
        here = f" at relay {job.shard.index} of {job.shard.count} (it holds {job.quota})" if job.shard else ""
        message = (
            f"the world of job {job.id!r} did not fill within {fill_timeout:g} s: {len(job.members)} of {job.size} "
            f"ranks joined{here}; missing ranks: {describe_ranks(missing) if missing else 'none here'}"
        )
        self._fail(job, "fill_timeout", message, {"missing": missing})

    def _abort(
        self, job: Job, code: int, reason: str, origin: int | None, cause: dict[str, Any] | None = None,
        by_relay: bool = False, from_shard: bool = False,
    ) -> None:
        """`origin`: the aborting rank (None: the launcher, or this relay itself with `by_relay`). A rank's abort
        reaches the ranks of every shard of a sharded job, and the launcher once (`from_shard`: told by another)."""
        if job.over:
            return
        job.aborted = True
        body = {**abort_body(code, reason, cause), "rank": origin, **({"by": "relay"} if by_relay else {})}
        for m in job.members.values():
            m.conn.send(Kind.ABORT, body)
        job.free_objects("aborted", f"job {job.id!r} was aborted: {reason}")
        for session in job.dso_sessions:
            session.conn.send(Kind.ABORT, body)
        if job.shard is not None and origin is not None and not from_shard:
            self._shard_broadcast(job, {"type": "abort", "code": code, "reason": reason, "origin": origin,
                                        **({"cause": cause} if cause else {})})
        if not from_shard:
            job.watcher.send(Kind.ABORT, body)
        log.info("job %s aborted by %s: %s", job.id, "the relay" if by_relay else "the launcher" if origin is None else f"rank {origin}", reason)

    def _fail(self, job: Job, code: str, message: str, extra: dict[str, Any] | None = None) -> None:
        body = {"code": code, "message": message, **(extra or {})}
        for m in job.members.values():
            m.conn.send(Kind.ERROR, body)
            m.conn.close()
        job.watcher.send(Kind.ERROR, body)
        self._end_job(job)

    def _end_job(self, job: Job, abort_reason: str | None = None, by_relay: bool = False) -> None:
        if job.over:
            return
        if abort_reason is not None:
            self._abort(job, 1, abort_reason, None, by_relay=by_relay)
        job.over = True
        if job.fill_timer is not None:
            job.fill_timer.cancel()
        self._stop_resuming(job)
        if job.shard is not None:
            self._shard_end(job)
        self.jobs.pop(job.id, None)
        self._drop_names(job)
        job.free_objects("job_over", f"job {job.id!r} ended")
        for session in list(job.dso_sessions):
            session.conn.send(Kind.ERROR, {"code": "job_over", "message": f"job {job.id!r} ended; its shared objects are gone"})
            session.conn.close()
        job.watcher.close()

    def _disconnected(self, job: Job, role: Job | Member | None, broke: bool = False) -> None:
        """`role`'s connection ended: by end of file (its process exited), or `broke` (a reset, an error)."""
        if isinstance(role, Job):
            if not job.over:
                # Without its launcher nobody collects results or ends the job:
                # stop the ranks rather than let them wait (and bill) forever.
                self._end_job(job, abort_reason="the launcher disconnected from the relay")
            return
        if not isinstance(role, Member) or job.over or job.members.get(role.rank) is not role:
            return
        if not job.world_published:
            # Before the world is out, a slot whose rank went away may be taken again.
            del job.members[role.rank]
            job.watcher.send(Kind.EVENT, {"type": "left", "rank": role.rank, "joined": len(job.members)})
            self._unfilled(job)
            return
        if broke and role.finished is None and role.beats and role.silent_for is None:
            self._went_away(job, role)  # (the process may live on: it gets a window to reconnect)
            return
        role.left = True
        if role.finished is None:
            event = {"type": "lost", "rank": role.rank}
            if role.silent_for is not None:
                event["silent"] = round(role.silent_for, 1)
            job.watcher.send(Kind.EVENT, event)
            # The others must not wait for it (a link set-up, a relayed message).
            # After a short grace, so that a launcher that sees the process die
            # names that as the cause (and aborts the job) before the ranks
            # stumble on the missing peer.
            asyncio.get_running_loop().call_later(self.lost_notice_delay, self._notify_lost, job, role.rank)

    async def _watch_heartbeats(self) -> None:
        """Every second beat to every rank; four times a second, cut off ranks silent for ``heartbeat_timeout``
        (and count as lost those away past their reconnect grace: ``reconnect.py``).

        Cutting the connection makes the usual path run: the launcher hears
        "lost" (with why), the other ranks PEER_LOST. Checking often keeps a
        frozen rank's detection close to the timeout itself (checked once a
        second, a stopped rank took up to 5.2 s to be named; the promise is 5).
        """
        loop = asyncio.get_running_loop()
        beat_every = min(1.0, self.heartbeat_timeout / 3)
        check_every = min(0.25, beat_every)
        last = next_beat = loop.time()
        while True:
            await asyncio.sleep(check_every)
            now = loop.time()
            stalled = now - last > check_every + 0.5
            last = now
            beat = now >= next_beat
            if beat:
                next_beat = now + beat_every
            for job in list(self.jobs.values()):
                if job.over or job.aborted or not job.world_published:
                    continue
                for m in list(job.members.values()):
                    if m.left or m.finished is not None:
                        continue
                    if stalled:
                        # This relay was not running (a starved host): the ranks' beats of that
                        # time may still wait unread in its sockets. Judge no one on it.
                        m.last_heard = max(m.last_heard, now - check_every)
                    if m.away_since is not None:
                        if stalled:
                            m.away_since = max(m.away_since, now - check_every)
                        if now - m.away_since > self.reconnect_grace:
                            self._away_expired(job, m, now)
                        continue
                    if m.conn.writer.is_closing():
                        continue
                    if m.beats and now - m.last_heard > self.heartbeat_timeout:
                        silent = now - m.last_heard
                        log.warning("job %s: rank %d silent for %.1f s; dropping it", job.id, m.rank, silent)
                        m.silent_for = silent
                        m.conn.writer.transport.abort()
                    elif beat:
                        m.conn.send(Kind.HEARTBEAT, {})

    def _notify_lost(self, job: Job, lost: int, from_shard: bool = False) -> None:
        """Tell every member still connected that rank `lost` is gone (of every shard of a sharded job)."""
        if job.over or job.aborted:
            return
        if job.shard is not None and not from_shard:
            self._shard_broadcast(job, {"type": "lost", "rank": lost})
        for m in job.members.values():
            if m.rank != lost and not m.left:
                m.conn.send(Kind.PEER_LOST, {"rank": lost})


def _full(job: Job) -> Refused:
    """No free slot for a rank that takes any: the job is full (or, sharded, this relay's part of it)."""
    if job.shard is None:
        return Refused("duplicate", f"job {job.id!r} is full ({job.size} ranks)")
    return Refused("shard_full", f"every slot of job {job.id!r} at relay {job.shard.index} of {job.shard.count} is "
                                 "taken: try another relay of the job")


def _joined_once(job: Job, incarnation: str) -> None:
    """Refuse an invocation that already holds a slot (the platform delivered it twice: it is one rank, not two)."""
    again = next((m.rank for m in job.members.values() if m.incarnation == incarnation), None)
    if again is not None:
        raise Refused("duplicate", f"incarnation {incarnation!r} already joined job {job.id!r} as rank {again}; "
                                   "this duplicate is refused")


def _link_reports(raw: Any, size: int) -> list[dict[str, Any]] | None:
    """The link statistics a rank sent with FINISHED, checked and trimmed."""
    if not isinstance(raw, list):
        return None
    out = []
    for item in raw[:size]:
        if not isinstance(item, dict):
            continue
        peer, kind = item.get("peer"), item.get("kind")
        seconds, failovers = item.get("seconds"), item.get("failovers", 0)
        if not isinstance(peer, int) or kind not in LINK_KINDS:
            continue
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            seconds = None
        if not isinstance(failovers, int) or isinstance(failovers, bool):
            failovers = 0
        shared = item.get("shared_memory") is True
        why = {"why": item["why"][:200]} if isinstance(item.get("why"), str) else {}
        out.append({"peer": peer, "kind": kind, "seconds": seconds, "failovers": failovers, "shared_memory": shared, **why})
    return out
