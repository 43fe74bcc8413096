"""fmpi-relay: the rendezvous service ranks meet at.

A launcher CREATEs a job (id, secret token, size) and watches it; ranks
REGISTER into the job's rank slots with the token. The relay records the
address each rank's connection came from (its public endpoint behind a NAT),
and once every slot is taken it publishes the WORLD — every rank's endpoints
— to all of them. It forwards aborts to every member, relays rank output,
progress and link events to the launcher, tells members when one of them is
lost, and fails a job that does not fill in time, naming the missing ranks.

NAT traversal support:

* a *probe port*: any connection to it gets one OBSERVED frame saying where
  it came from, then is closed. A rank behind a NAT connects to it from its
  shared port; if the address differs from what the main port saw, its NAT
  maps per destination (symmetric) and punching is pointless. A rank may
  also ask the main port (OBSERVE, before REGISTER).
* FORWARD frames: the byte stream of a relayed rank pair, chunk by chunk.
  The relay stamps the sender's rank on each chunk and passes it on; it
  never parses it. Flow control keeps memory bounded: after writing to a
  destination whose send buffer passed ``forward_high_water`` bytes, the
  relay stops reading from the sender until the destination drains. A
  destination that does not drain within ``forward_stall_timeout`` is cut
  off (it is not reading: one client cannot stall the others for ever).
  Undeliverable chunks (the rank finished, or is gone) are dropped with one
  UNDELIVERABLE notice per sender and destination.

One job's trouble never reaches another: every connection is handled on its
own, bad frames close only the connection that sent them, and all limits
(frame size, jobs, time to first frame, send backlog) are per connection or
per relay.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..ranges import describe_ranks
from .protocol import (
    FORWARD_RANK,
    HEADER_SIZE,
    MAX_CLIENT_FRAME,
    Kind,
    ProtocolError,
    decode_body,
    decode_header,
    encode,
    forward_header,
    parse_endpoint,
    parse_endpoints,
)

LINK_KINDS = ("direct", "punched", "relayed")

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

    def forward(self, source: int, chunk: memoryview) -> None:
        self.writer.writelines([forward_header(source, len(chunk)), chunk])

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
        probe_port: int | None = 0,
        forward_high_water: int = 4 << 20,
        forward_stall_timeout: float = 30.0,
        lost_notice_delay: float = 1.0,
    ) -> None:
        self._host = host
        self._port = port
        self._probe_port = probe_port
        self.forward_high_water = forward_high_water
        self.forward_stall_timeout = forward_stall_timeout
        self.lost_notice_delay = lost_notice_delay
        self.max_jobs = max_jobs
        self.max_job_size = max_job_size
        self.max_frame = max_frame
        self.first_frame_timeout = first_frame_timeout
        self.max_backlog = max_backlog
        self.jobs: dict[str, Job] = {}
        self._server: asyncio.base_events.Server | None = None
        self._probe_server: asyncio.base_events.Server | None = None
        self._handlers: dict[asyncio.Task, Connection] = {}

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "relay not started"
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def probe_port(self) -> int | None:
        if self._probe_server is None:
            return None
        return self._probe_server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port, reuse_address=True)
        if self._probe_port is not None:
            try:
                self._probe_server = await asyncio.start_server(
                    self._probe, self._host, self._probe_port, reuse_address=True
                )
            except OSError as exc:
                log.warning("no probe port (NAT type detection off): %s", exc)

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def close(self) -> None:
        for job in list(self.jobs.values()):
            self._end_job(job, abort_reason="the relay is shutting down")
        for server in (self._server, self._probe_server):
            if server is not None:
                server.close()
        # Drop every connection; handlers then end on their own (no cancellation).
        for conn in self._handlers.values():
            conn.writer.transport.abort()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _probe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The probe port: say where the connection came from, then close."""
        try:
            writer.write(encode(Kind.OBSERVED, {"observed": list(writer.get_extra_info("peername")[:2])}))
            await asyncio.wait_for(writer.drain(), 5.0)
        except (OSError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    # ----------------------------------------------------------- connections
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, self.max_backlog, writer.get_extra_info("peername")[:2])
        task = asyncio.current_task()
        self._handlers[task] = conn
        role: Job | Member | None = None
        job: Job | None = None
        try:
            kind, body = await asyncio.wait_for(self._read(conn), self.first_frame_timeout)
            if kind is Kind.OBSERVE:
                conn.send(Kind.OBSERVED, {"observed": list(conn.peer), "probe_port": self.probe_port})
                kind, body = await asyncio.wait_for(self._read(conn), self.first_frame_timeout)
            if kind is Kind.CREATE:
                job = role = self._create(conn, body)
            elif kind is Kind.REGISTER:
                job, role = self._register(conn, body)
            else:
                raise Refused("protocol", f"a connection must start with CREATE or REGISTER (or OBSERVE), not {kind.name}")
            while True:
                kind, length = decode_header(await conn.reader.readexactly(HEADER_SIZE), self.max_frame)
                payload = await conn.reader.readexactly(length) if length else b""
                if kind is Kind.FORWARD:
                    await self._forward(job, role, payload)
                else:
                    self._dispatch(job, role, kind, decode_body(kind, payload))
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
            if job is not None:
                self._disconnected(job, role)
            conn.close()

    async def _read(self, conn: Connection) -> tuple[Kind, dict[str, Any]]:
        kind, length = decode_header(await conn.reader.readexactly(HEADER_SIZE), self.max_frame)
        return kind, decode_body(kind, await conn.reader.readexactly(length) if length else b"")

    async def _forward(self, job: Job, role: Job | Member, payload: bytes) -> None:
        """Pass a chunk of a relayed link on to its destination rank (see the module docstring)."""
        if not isinstance(role, Member) or not job.world_published:
            raise Refused("protocol", "FORWARD is for members of a job whose world is published")
        if len(payload) < FORWARD_RANK.size:
            raise ProtocolError("FORWARD frame without a rank")
        (dest,) = FORWARD_RANK.unpack_from(payload)
        target = job.members.get(dest)
        reason = None
        if target is None or dest == role.rank:
            reason = "unknown"
        elif target.finished is not None:
            reason = "finished"
        elif target.left or target.conn.writer.is_closing():
            reason = "lost"
        if reason is not None:
            if dest not in role.told_undeliverable:
                role.told_undeliverable.add(dest)
                what = {"unknown": "is not a member of this job", "finished": "has finalized", "lost": "is gone"}[reason]
                role.conn.send(Kind.UNDELIVERABLE, {"rank": dest, "reason": reason, "message": f"rank {dest} {what}"})
            return
        conn = target.conn
        conn.forward(role.rank, memoryview(payload)[FORWARD_RANK.size :])
        if conn.backlog() > self.forward_high_water:
            try:
                await asyncio.wait_for(conn.writer.drain(), self.forward_stall_timeout)
            except asyncio.TimeoutError:
                log.warning("job %s: rank %d does not read its relayed frames; dropping it", job.id, dest)
                conn.writer.transport.abort()
            except (ConnectionError, OSError):
                pass

    def _dispatch(self, job: Job, role: Job | Member, kind: Kind, body: dict[str, Any]) -> None:
        if kind is Kind.ABORT:
            origin = role.rank if isinstance(role, Member) else None
            self._abort(job, body["code"], body["reason"], origin)
        elif isinstance(role, Member) and kind is Kind.OUTPUT:
            job.watcher.send(Kind.EVENT, {"type": "output", "rank": role.rank, "stream": body["stream"], "data": body["data"]})
        elif isinstance(role, Member) and kind is Kind.FINISHED:
            role.finished = body["code"]
            event = {"type": "finished", "rank": role.rank, "code": role.finished}
            links = _link_reports(body.get("links"), job.size)
            if links is not None:
                event["links"] = links
            job.watcher.send(Kind.EVENT, event)
        elif isinstance(role, Member) and kind is Kind.LINK:
            if body["kind"] in LINK_KINDS:
                event = {"type": "link", "rank": role.rank, "peer": body["peer"], "kind": body["kind"],
                         "seconds": body["seconds"], "event": str(body.get("event", "up"))[:16]}
                job.watcher.send(Kind.EVENT, event)
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
        probe = parse_endpoint(body["probe"]) if body.get("probe") is not None else None
        member = Member(rank, body["incarnation"], conn, parse_endpoints(body["endpoints"]), conn.peer, probe)
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
            {
                "rank": m.rank,
                "endpoints": [list(e) for e in m.endpoints],
                "observed": list(m.observed),
                "probe": list(m.probe) if m.probe else None,
            }
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
            f"ranks joined; missing ranks: {describe_ranks(missing)}"
        )
        self._fail(job, "fill_timeout", message, {"missing": missing})

    def _abort(self, job: Job, code: int, reason: str, origin: int | None) -> None:
        if job.over:
            return
        job.aborted = True
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
            return
        role.left = True
        if role.finished is None:
            job.watcher.send(Kind.EVENT, {"type": "lost", "rank": role.rank})
            # The others must not wait for it (a link set-up, a relayed message).
            # After a short grace, so that a launcher that sees the process die
            # names that as the cause (and aborts the job) before the ranks
            # stumble on the missing peer.
            asyncio.get_running_loop().call_later(self.lost_notice_delay, self._notify_lost, job, role)

    def _notify_lost(self, job: Job, lost: Member) -> None:
        if job.over or job.aborted:
            return
        for m in job.members.values():
            if m is not lost and not m.left:
                m.conn.send(Kind.PEER_LOST, {"rank": lost.rank})


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
        out.append({"peer": peer, "kind": kind, "seconds": seconds, "failovers": failovers})
    return out


class RelayThread:
    """A relay running on its own event loop in a daemon thread (what fmpirun embeds)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self.server = RelayServer(host, port, **options)
        ready = threading.Event()
        self._error: BaseException | None = None

        def run() -> None:
            # Writing to a rank that just died must fail with EPIPE, not kill the
            # process hosting the relay (fmpirun restores the default SIGPIPE action
            # so that `fmpirun ... | head` ends quietly): SIGPIPE raised by this
            # thread's writes stays pending on it, blocked.
            if hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
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
