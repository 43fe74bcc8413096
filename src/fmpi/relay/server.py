"""fmpi-relay: the rendezvous service ranks meet at.

A launcher CREATEs a job (id, secret token, size) and watches it; ranks
REGISTER into the job's rank slots with the token. The relay records the
address each rank's connection came from (its public endpoint behind a NAT),
and once every slot is taken it publishes the WORLD — every rank's endpoints
— to all of them. It forwards aborts to every member, relays rank output and
progress events to the launcher, and fails a job that does not fill in time,
naming the missing ranks.

One job's trouble never reaches another: every connection is handled on its
own, bad frames close only the connection that sent them, and all limits
(frame size, jobs, time to first frame, send backlog) are per connection or
per relay.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .protocol import (
    HEADER_SIZE,
    MAX_CLIENT_FRAME,
    Kind,
    ProtocolError,
    decode_body,
    decode_header,
    encode,
    parse_endpoints,
)

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

    def send(self, kind: Kind, body: dict[str, Any] | None = None) -> None:
        if self.writer.is_closing():
            return
        # A client that does not read its frames must not make the relay
        # buffer without bound: drop it instead.
        if self.writer.transport.get_write_buffer_size() > self.max_backlog:
            log.warning("dropping %s:%s: it does not read its frames", *self.peer)
            self.writer.transport.abort()
            return
        self.writer.write(encode(kind, body))

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
    finished: int | None = None


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

    def missing(self) -> list[int]:
        return [r for r in range(self.size) if r not in self.members]


class RelayServer:
    """The asyncio relay service. ``await start()`` binds; ``address`` tells where."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        max_jobs: int = 10_000,
        max_job_size: int = 65_536,
        max_frame: int = MAX_CLIENT_FRAME,
        first_frame_timeout: float = 10.0,
        max_backlog: int = 64 << 20,
    ) -> None:
        self._host = host
        self._port = port
        self.max_jobs = max_jobs
        self.max_job_size = max_job_size
        self.max_frame = max_frame
        self.first_frame_timeout = first_frame_timeout
        self.max_backlog = max_backlog
        self.jobs: dict[str, Job] = {}
        self._server: asyncio.base_events.Server | None = None
        self._handlers: dict[asyncio.Task, Connection] = {}

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "relay not started"
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port, reuse_address=True)

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def close(self) -> None:
        for job in list(self.jobs.values()):
            self._end_job(job, abort_reason="the relay is shutting down")
        if self._server is not None:
            self._server.close()
        # Drop every connection; handlers then end on their own (no cancellation).
        for conn in self._handlers.values():
            conn.writer.transport.abort()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    # ----------------------------------------------------------- connections
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, self.max_backlog, writer.get_extra_info("peername")[:2])
        task = asyncio.current_task()
        self._handlers[task] = conn
        role: Job | Member | None = None
        job: Job | None = None
        try:
            kind, body = await asyncio.wait_for(self._read(conn), self.first_frame_timeout)
            if kind is Kind.CREATE:
                job = role = self._create(conn, body)
            elif kind is Kind.REGISTER:
                job, role = self._register(conn, body)
            else:
                raise Refused("protocol", f"a connection must start with CREATE or REGISTER, not {kind.name}")
            while True:
                kind, body = await self._read(conn)
                self._dispatch(job, role, kind, body)
        except Refused as exc:
            conn.send(Kind.ERROR, {"code": exc.code, "message": str(exc)})
        except ProtocolError as exc:
            log.info("closing %s:%s: %s", *conn.peer, exc)
            conn.send(Kind.ERROR, {"code": "protocol", "message": str(exc)})
        except asyncio.TimeoutError:
            conn.send(Kind.ERROR, {"code": "timeout", "message": "no request within the time allowed"})
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self._handlers.pop(task, None)
            if job is not None:
                self._disconnected(job, role)
            conn.close()

    async def _read(self, conn: Connection) -> tuple[Kind, dict[str, Any]]:
        kind, length = decode_header(await conn.reader.readexactly(HEADER_SIZE), self.max_frame)
        return kind, decode_body(kind, await conn.reader.readexactly(length) if length else b"")

    def _dispatch(self, job: Job, role: Job | Member, kind: Kind, body: dict[str, Any]) -> None:
        if kind is Kind.ABORT:
            origin = role.rank if isinstance(role, Member) else None
            self._abort(job, body["code"], body["reason"], origin)
        elif isinstance(role, Member) and kind is Kind.OUTPUT:
            job.watcher.send(Kind.EVENT, {"type": "output", "rank": role.rank, "stream": body["stream"], "data": body["data"]})
        elif isinstance(role, Member) and kind is Kind.FINISHED:
            role.finished = body["code"]
            job.watcher.send(Kind.EVENT, {"type": "finished", "rank": role.rank, "code": role.finished})
        elif isinstance(role, Job) and kind is Kind.END:
            self._end_job(job)
        else:
            raise Refused("protocol", f"{kind.name} is not a valid request here")

    # ----------------------------------------------------------------- jobs
    def _create(self, conn: Connection, body: dict[str, Any]) -> Job:
        job_id, size = body["job"], body["size"]
        if not 0 < len(job_id) <= 128:
            raise Refused("bad_request", "job id must be 1 to 128 characters")
        if not 1 <= size <= self.max_job_size:
            raise Refused("bad_request", f"job size must be 1 to {self.max_job_size}, not {size}")
        if len(body["token"]) < 16:
            raise Refused("bad_request", "job token must be at least 16 characters")
        if job_id in self.jobs:
            raise Refused("job_exists", f"job {job_id!r} already exists on this relay")
        if len(self.jobs) >= self.max_jobs:
            raise Refused("limit", f"this relay already holds {self.max_jobs} jobs")
        job = Job(job_id, body["token"], size, time.monotonic(), conn)
        self.jobs[job_id] = job
        fill_timeout = float(body["fill_timeout"])
        job.fill_timer = asyncio.get_running_loop().call_later(fill_timeout, self._fill_expired, job, fill_timeout)
        conn.send(Kind.CREATED, {"job": job_id})
        log.info("job %s created (%d ranks)", job_id, size)
        return job

    def _register(self, conn: Connection, body: dict[str, Any]) -> tuple[Job, Member]:
        job = self.jobs.get(body["job"])
        if job is None or job.over:
            raise Refused("unknown_job", f"no job {body['job']!r} on this relay (it ended, or was never created)")
        if not hmac.compare_digest(body["token"].encode(), job.token.encode()):
            raise Refused("auth", f"wrong token for job {job.id!r}")
        rank = body["rank"]
        if rank == -1:  # "any free slot": ranks joined by hand need not pick one
            missing = job.missing()
            if not missing:
                raise Refused("duplicate", f"job {job.id!r} is full ({job.size} ranks)")
            rank = missing[0]
        if not 0 <= rank < job.size:
            raise Refused("bad_rank", f"rank {rank} is outside job {job.id!r} of {job.size} ranks")
        if rank in job.members:
            other = job.members[rank]
            raise Refused(
                "duplicate",
                f"rank {rank} of job {job.id!r} is already registered (incarnation {other.incarnation!r}); "
                f"this duplicate (incarnation {body['incarnation']!r}) is refused",
            )
        member = Member(rank, body["incarnation"], conn, parse_endpoints(body["endpoints"]), conn.peer)
        job.members[rank] = member
        conn.send(Kind.REGISTERED, {"rank": rank, "size": job.size, "observed": list(conn.peer)})
        job.watcher.send(Kind.EVENT, {"type": "joined", "rank": rank, "joined": len(job.members), "size": job.size})
        if len(job.members) == job.size:
            self._publish_world(job)
        return job, member

    def _publish_world(self, job: Job) -> None:
        job.world_published = True
        if job.fill_timer is not None:
            job.fill_timer.cancel()
        peers = [
            {"rank": m.rank, "endpoints": [list(e) for e in m.endpoints], "observed": list(m.observed)}
            for m in sorted(job.members.values(), key=lambda m: m.rank)
        ]
        body = {"size": job.size, "peers": peers}
        for m in job.members.values():
            m.conn.send(Kind.WORLD, body)
        job.watcher.send(Kind.EVENT, {"type": "world", "seconds": round(time.monotonic() - job.created, 6)})
        log.info("job %s: world of %d ranks published", job.id, job.size)

    def _fill_expired(self, job: Job, fill_timeout: float) -> None:
        if job.world_published or job.over:
            return
        missing = job.missing()
        message = (
            f"the world of job {job.id!r} did not fill within {fill_timeout:g} s: {len(job.members)} of {job.size} "
            f"ranks joined; missing ranks: {_ranges(missing)}"
        )
        self._fail(job, "fill_timeout", message, {"missing": missing})

    def _abort(self, job: Job, code: int, reason: str, origin: int | None) -> None:
        if job.over:
            return
        body = {"code": code, "reason": reason, "rank": origin}
        for m in job.members.values():
            m.conn.send(Kind.ABORT, body)
        job.watcher.send(Kind.ABORT, body)
        log.info("job %s aborted by %s: %s", job.id, "launcher" if origin is None else f"rank {origin}", reason)

    def _fail(self, job: Job, code: str, message: str, extra: dict[str, Any] | None = None) -> None:
        body = {"code": code, "message": message, **(extra or {})}
        for m in job.members.values():
            m.conn.send(Kind.ERROR, body)
            m.conn.close()
        job.watcher.send(Kind.ERROR, body)
        self._end_job(job)

    def _end_job(self, job: Job, abort_reason: str | None = None) -> None:
        if job.over:
            return
        if abort_reason is not None:
            self._abort(job, 1, abort_reason, None)
        job.over = True
        if job.fill_timer is not None:
            job.fill_timer.cancel()
        self.jobs.pop(job.id, None)
        job.watcher.close()

    def _disconnected(self, job: Job, role: Job | Member | None) -> None:
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
        elif role.finished is None:
            job.watcher.send(Kind.EVENT, {"type": "lost", "rank": role.rank})


def _ranges(ranks: list[int]) -> str:
    """[0,1,2,5,7,8] -> '0-2, 5, 7-8' (so a 1000-rank failure message stays readable)."""
    parts = []
    start = prev = None
    for r in ranks + [None]:
        if r is not None and prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = r
    return ", ".join(parts) if parts else "none"


class RelayThread:
    """A relay running on its own event loop in a daemon thread (what fmpirun embeds)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self.server = RelayServer(host, port, **options)
        ready = threading.Event()
        self._error: BaseException | None = None

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self.server.start())
            except BaseException as exc:  # report bind errors to the caller
                self._error = exc
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="fmpi-relay", daemon=True)
        self._thread.start()
        ready.wait()
        if self._error is not None:
            raise self._error

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    def stop(self) -> None:
        if not self._loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
