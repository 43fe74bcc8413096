"""A job that outlives a restart of its relay: re-created with ``resume``, its live ranks rejoin.

Why: a relay process that dies (SIGKILL, a redeploy) loses every job it held,
yet the ranks of a job mostly talk directly to each other and are still
running. So after a new fmpi-relay comes up on the same port, the launcher
CREATEs the job again with ``resume`` (every unfinished rank's incarnation,
every finished rank's exit code, how long to wait), and each live rank
REGISTERs again with ``"resume": true``. No WORLD is published again (the
ranks have it); the relay only takes the ranks back, one by one:

* a rejoining rank must be expected, with the same incarnation (a second
  process for the same rank is refused as a duplicate);
* FORWARD chunks to a rank not back yet are held (up to ``rejoin_hold_bytes``
  per rank) and delivered right after its REGISTERED: a rank that rejoins
  first tells each relayed peer where their stream resumes, and that must
  not be lost because the peer is a little later;
* FORWARD to a rank that finished before the restart is UNDELIVERABLE
  ("finished"), as if it had sent FINISHED to this relay;
* ranks not back within ``rejoin_timeout`` are lost: the launcher hears
  ``lost`` (``"rejoin": false``), the rejoined ranks PEER_LOST.

A mixin of ``RelayServer`` through ``jobs.JobLifecycle``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from typing import Any, Callable

from ..util.ranges import describe_ranks
from ..wire.relay_protocol import Kind, ProtocolError, parse_endpoint
from .records import (
    Connection,
    Job,
    Member,
    Refused,
    Resumption,
)

log = logging.getLogger("fmpi.relay")

DEFAULT_REJOIN_TIMEOUT = 30.0
MAX_INCARNATION = 128
_RANK_KEY = re.compile(r"0|[1-9][0-9]{0,9}")  # a rank as a JSON object key: no sign, no leading zeros


def parse_resume(raw: Any, job_id: str, size: int) -> Resumption:
    """The `resume` field of a CREATE, checked strictly (Refused "bad_request" with what is wrong)."""
    where = f"CREATE of job {job_id!r}: resume"
    if not isinstance(raw, dict):
        raise Refused("bad_request", f"{where} must be an object with incarnations, finished and rejoin_timeout")
    incarnations = _rank_map(raw.get("incarnations"), f"{where}.incarnations", size, _incarnation_problem)
    finished = _rank_map(raw.get("finished", {}), f"{where}.finished", size, _exit_code_problem)
    both = sorted(incarnations.keys() & finished.keys())
    if both:
        raise Refused("bad_request", f"{where}: ranks {describe_ranks(both)} are in both incarnations and finished")
    neither = [r for r in range(size) if r not in incarnations and r not in finished]
    if neither:
        raise Refused(
            "bad_request",
            f"{where}: ranks {describe_ranks(neither)} are in neither incarnations nor finished "
            f"(each of the {size} ranks must be in exactly one)",
        )
    timeout = raw.get("rejoin_timeout", DEFAULT_REJOIN_TIMEOUT)
    # (NaN fails the comparison too: JSON from Python may carry NaN and Infinity)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise Refused("bad_request", f"{where}.rejoin_timeout must be a positive number of seconds, not {timeout!r}")
    return Resumption(incarnations, finished, float(timeout))


def _rank_map(raw: Any, where: str, size: int, problem_of: Callable[[Any], str | None]) -> dict[int, Any]:
    """{"rank": value} from the wire -> {rank: value}, every key a rank of the job, every value passing `problem_of`."""
    if not isinstance(raw, dict):
        raise Refused("bad_request", f"{where} must be an object whose keys are rank numbers (as strings)")
    out: dict[int, Any] = {}
    for key, value in raw.items():
        if not _RANK_KEY.fullmatch(key) or int(key) >= size:
            raise Refused("bad_request", f"{where}: {key[:20]!r} is not a rank of this job (0 to {size - 1}, as a string)")
        problem = problem_of(value)
        if problem is not None:
            raise Refused("bad_request", f"{where}[{key!r}] {problem}")
        out[int(key)] = value
    return out


def _incarnation_problem(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= MAX_INCARNATION:
        return None
    return f"must be the rank's incarnation, a string of 1 to {MAX_INCARNATION} characters, not {str(value)[:40]!r}"


def _exit_code_problem(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    return f"must be the rank's exit code (an integer), not {str(value)[:40]!r}"


def wants_rejoin(body: dict[str, Any]) -> bool:
    """Whether a REGISTER asks to rejoin a resumed job (its optional "resume" is true)."""
    resume = body.get("resume")
    if resume is None or isinstance(resume, bool):
        return resume is True
    raise Refused("bad_request", f"REGISTER field 'resume' must be true or false, not {str(resume)[:40]!r}")


def absent_reason(job: Job, rank: int) -> str:
    """Why a FORWARD cannot reach `rank`, not a member: "finished" or "lost" (a resumed job's), else "unknown"."""
    if job.resumed is not None:
        if rank in job.resumed.finished:
            return "finished"
        if rank in job.resumed.lost:
            return "lost"
    return "unknown"


def _observed(raw: Any, peer: tuple[str, int]) -> tuple[str, int]:
    """Where the first relay saw the rank (peers still punch to it), if the REGISTER says so validly; else `peer`."""
    if raw is None:
        return peer
    try:
        return parse_endpoint(raw)
    except ProtocolError:
        return peer


class JobResumption:
    """Resumed jobs: rejoining ranks, chunks held for them, the rejoin timer (see the module docstring)."""

    rejoin_hold_bytes: int
    _notify_lost: Callable[[Job, int], None]  # (jobs.JobLifecycle)

    def _resume_job(self, job: Job, plan: Resumption) -> None:
        """Start a job re-created with `resume`: its world is out already; wait for its ranks to rejoin."""
        job.world_published = True  # (no fill timer, no WORLD: the ranks have it from before the restart)
        job.resumed = plan
        if plan.expected:
            plan.timer = asyncio.get_running_loop().call_later(plan.rejoin_timeout, self._rejoin_expired, job)
        job.watcher.send(Kind.CREATED, {"job": job.id, "resumed": True})
        log.info(
            "job %s resumed with %d ranks expected to rejoin within %g s (%d finished before the restart)",
            job.id, len(plan.expected), plan.rejoin_timeout, len(plan.finished),
        )

    def _rejoin(self, conn: Connection, job: Job, body: dict[str, Any]) -> Member:
        """A REGISTER with resume: take the rank back (refused unless it is expected, as the same incarnation)."""
        plan = job.resumed
        if plan is None:
            raise Refused(
                "bad_request",
                f"job {job.id!r} is not resuming; a rank registers with resume only after its launcher "
                "re-created the job with resume (after a relay restart)",
            )
        if job.aborted:
            raise Refused("aborted", f"job {job.id!r} was aborted")
        _check_rejoin(job, plan, body["rank"], body["incarnation"])
        rank = body["rank"]
        observed = _observed(body.get("observed"), conn.peer)
        member = Member.registered(conn, rank, body, observed, asyncio.get_running_loop().time())
        del plan.expected[rank]
        job.members[rank] = member
        conn.send(Kind.REGISTERED, {"rank": rank, "size": job.size, "observed": list(observed)})
        if member.beats:
            conn.send(Kind.HEARTBEAT, {})  # at once: the rank then knows this relay beats
        plan.held_bytes.pop(rank, None)
        for source, chunk in plan.held.pop(rank, []):
            conn.forward(source, memoryview(chunk))
        job.watcher.send(Kind.EVENT, {"type": "rejoined", "rank": rank})
        if not plan.expected:
            self._stop_resuming(job)
            log.info("job %s: every expected rank rejoined", job.id)
        return member

    def _hold(self, job: Job, source: int, dest: int, chunk: memoryview) -> bool:
        """Keep a FORWARD chunk for `dest` if it is yet to rejoin (True), up to ``rejoin_hold_bytes``."""
        plan = job.resumed
        if plan is None or dest not in plan.expected:
            return False
        if dest in plan.overflowed:
            return True
        held = plan.held_bytes.get(dest, 0) + len(chunk)
        if held > self.rejoin_hold_bytes:
            # From here on nothing more is held for it: a stream with a hole in
            # its middle would be worse than one cut short.
            plan.overflowed.add(dest)
            log.warning(
                "job %s: more than %d bytes relayed to rank %d before it rejoined; dropping what does not fit",
                job.id, self.rejoin_hold_bytes, dest,
            )
            return True
        plan.held.setdefault(dest, []).append((source, bytes(chunk)))
        plan.held_bytes[dest] = held
        return True

    def _rejoin_expired(self, job: Job) -> None:
        """The rejoin timer: every rank not back yet is lost (launcher: "lost", rejoined ranks: PEER_LOST)."""
        plan = job.resumed
        if plan is None or job.over:
            return
        missing = sorted(plan.expected)
        if missing:
            log.warning(
                "job %s: ranks %s did not rejoin within %g s; they are lost", job.id, describe_ranks(missing), plan.rejoin_timeout
            )
        for rank in missing:
            plan.lost[rank] = plan.expected.pop(rank)
            plan.held.pop(rank, None)
            plan.held_bytes.pop(rank, None)
            job.watcher.send(Kind.EVENT, {"type": "lost", "rank": rank, "rejoin": False})
            self._notify_lost(job, rank)
        plan.timer = None

    def _stop_resuming(self, job: Job) -> None:
        """No more rejoin timer nor held chunks (every rank is back, or the job ended)."""
        plan = job.resumed
        if plan is None:
            return
        if plan.timer is not None:
            plan.timer.cancel()
            plan.timer = None
        plan.held.clear()
        plan.held_bytes.clear()


def _check_rejoin(job: Job, plan: Resumption, rank: int, incarnation: str) -> None:
    """Refuse a rejoin of a rank that is not expected back as `incarnation` (with who is, or why not)."""
    if not 0 <= rank < job.size:
        raise Refused(
            "bad_rank", f"rank {rank} is outside job {job.id!r} of {job.size} ranks (a rejoining rank names its own rank)"
        )
    if rank in plan.finished:
        raise Refused(
            "bad_rank",
            f"rank {rank} of job {job.id!r} finished (exit code {plan.finished[rank]}) before the relay restarted; "
            "it cannot rejoin",
        )
    # (a rank back already is a member: ``reconnect.py`` takes its next REGISTER)
    if rank in plan.lost:
        raise Refused(
            "duplicate",
            f"rank {rank} of job {job.id!r} (incarnation {plan.lost[rank]!r}) did not rejoin within {plan.rejoin_timeout:g} s "
            f"and counts as lost; incarnation {incarnation!r} is refused",
        )
    expected = plan.expected[rank]
    if incarnation != expected:
        raise Refused(
            "duplicate",
            f"rank {rank} of job {job.id!r} is expected back as incarnation {expected!r}, not {incarnation!r}: "
            "another process for the same rank is refused",
        )
