"""fmpi-relay: the rendezvous service ranks meet at.

A launcher CREATEs a job (id, secret token, size) and watches it; ranks
REGISTER into the job's rank slots with the token. The relay records the
address each rank's connection came from (its public endpoint behind a NAT),
and once every slot is taken it publishes the WORLD — the job's size — to
all of them; a rank then looks up (LOOKUP) the records of the peers it
links to. It forwards aborts to every member, relays rank output,
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

Distributed shared objects: a job's ranks may also attach DSO connections
and call methods of objects the relay hosts (``dso_serving.py``). MPI name
publishing: a connection of a job's process may publish, look up or withdraw
one service name in the relay's bounded name table (``names.py``).

What the relay keeps per connection and job is in ``records.py``; what
happens to jobs (create, register, world, requests, abort, end, lost ranks,
heartbeats) in ``jobs.py``; how a job survives a restart of this relay
(re-created with ``resume``, its ranks rejoin, chunks to ranks not back yet
are held for them) in ``resume.py``; a member whose connection broke and
that reconnects in ``reconnect.py``. This module reads the connections.

TLS: with an ``ssl_context`` (``fmpi-relay --tls-cert/--tls-key``) the main
port speaks TLS only (clients use ``tls://host:port``). A handshake gets
``first_frame_timeout`` like a first frame, so a client that stalls in it,
or speaks plain TCP, holds nothing but its own connection. The probe port
stays plain TCP: it only ever says where a connection came from.

One job's trouble never reaches another: every connection is handled on its
own, bad frames close only the connection that sent them, and all limits
(frame size, jobs, time to first frame, send backlog) are per connection or
per relay.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import threading
from typing import Any

from ..wire.names import DEFAULT_MAX_NAMES, DEFAULT_MAX_PER_JOB, NameTable
from ..wire.relay_protocol import (
    DSO_PREFIX,
    FORWARD_RANK,
    HEADER_SIZE,
    MAX_CLIENT_FRAME,
    MAX_DSO_JSON,
    NAME_REQUESTS,
    Kind,
    ProtocolError,
    decode_body,
    decode_header,
    encode,
)
from .dso_serving import DsoServing
from .jobs import JobLifecycle
from .records import (
    Connection,
    Job,
    Member,
    Refused,
)
from .resume import absent_reason
from .strangers import DEFAULT_MAX_STRANGERS, Strangers

log = logging.getLogger("fmpi.relay")


class RelayServer(JobLifecycle, DsoServing):
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
        heartbeat_timeout: float = 4.0,
        reconnect_grace: float = 2.0,
        rejoin_hold_bytes: int = 1 << 20,
        dso_max_value: int = 64 << 20,
        dso_job_bytes: int = 256 << 20,
        ssl_context: ssl.SSLContext | None = None,
        max_strangers: int = DEFAULT_MAX_STRANGERS,
        stranger_bytes: int = 32 << 20,
        max_names: int = DEFAULT_MAX_NAMES,
        max_names_per_job: int = DEFAULT_MAX_PER_JOB,
    ) -> None:
        self.ssl_context = ssl_context
        self.dso_max_value = dso_max_value
        self.dso_job_bytes = dso_job_bytes
        # DSO_CALL frames may carry a value up to dso_max_value; larger ones are
        # read and dropped with a "too_large" reply, the connection stays up.
        self.dso_max_frame = dso_max_value + DSO_PREFIX.size + MAX_DSO_JSON
        self._host = host
        self._port = port
        self._probe_port = probe_port
        self.forward_high_water = forward_high_water
        self.forward_stall_timeout = forward_stall_timeout
        self.lost_notice_delay = lost_notice_delay
        # A rank that sends heartbeats and then falls silent this long is lost
        # (its host vanished, or it hangs with its progress thread stopped).
        self.heartbeat_timeout = heartbeat_timeout
        # A rank whose connection broke (a reset) may reconnect within this long before it is lost (reconnect.py).
        self.reconnect_grace = reconnect_grace
        self._heartbeats: asyncio.Task | None = None
        # What a resumed job keeps of the chunks relayed to one rank before it rejoined.
        self.rejoin_hold_bytes = rejoin_hold_bytes
        self.max_jobs = max_jobs
        self.max_job_size = max_job_size
        self.max_frame = max_frame
        self.first_frame_timeout = first_frame_timeout
        self.max_backlog = max_backlog
        self.jobs: dict[str, Job] = {}
        self.names = NameTable(max_names, max_names_per_job)  # MPI name publishing (names.py)
        self._server: asyncio.base_events.Server | None = None
        self._probe_server: asyncio.base_events.Server | None = None
        self._handlers: dict[asyncio.Task, Connection] = {}
        self._strangers = Strangers(max_strangers, stranger_bytes)  # connections before their first request

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
        tls = {"ssl": self.ssl_context, "ssl_handshake_timeout": self.first_frame_timeout} if self.ssl_context else {}
        self._server = await asyncio.start_server(self._handle, self._host, self._port, reuse_address=True, **tls)
        self._heartbeats = asyncio.get_running_loop().create_task(self._watch_heartbeats())
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
        if self._heartbeats is not None:
            self._heartbeats.cancel()
        for job in list(self.jobs.values()):
            self._end_job(job, abort_reason="the relay is shutting down", by_relay=True)
        for server in (self._server, self._probe_server):
            if server is not None:
                server.close()
        # Let the aborts just sent reach launchers and ranks: half-close (FIN after the
        # frames; a close with unread input would send a reset that can destroy them),
        # give the clients a moment to read and hang up, then drop what is left.
        handlers = dict(self._handlers)
        for conn in handlers.values():
            if conn.writer.can_write_eof() and not conn.writer.is_closing():
                try:
                    conn.writer.write_eof()
                except OSError:
                    pass  # (the client is gone already)
        if handlers:
            await asyncio.wait(handlers, timeout=2.0)
        for conn in handlers.values():
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
        self._strangers.arrived(task, conn)
        role: Job | Member | None = None
        job: Job | None = None
        broke = False  # (ended by an error, not by the client's end of file)
        try:
            kind, body = await asyncio.wait_for(self._read_first(conn), self.first_frame_timeout)
            if kind is Kind.OBSERVE:
                conn.send(Kind.OBSERVED, {"observed": list(conn.peer), "probe_port": self.probe_port})
                kind, body = await asyncio.wait_for(self._read_first(conn), self.first_frame_timeout)
            self._strangers.introduced(task)
            if kind is Kind.CREATE:
                job = role = self._create(conn, body)
            elif kind is Kind.REGISTER:
                job, role = self._register(conn, body)
            elif kind is Kind.DSO_CREATE:
                job = role = self._create(conn, body, dso_only=True)
            elif kind is Kind.DSO_ATTACH:
                job, role = self._dso_attach(conn, body)
                await self._dso_serve(job, role)
                return
            elif kind in NAME_REQUESTS:
                self._serve_name(conn, kind, body)
                return
            elif kind is Kind.SHARD_HELLO:
                job, shard = self._shard_attach(conn, body)
                await self._shard_serve(job, shard, conn)
                return
            else:
                raise Refused("protocol", f"a connection must start with CREATE or REGISTER (or OBSERVE), not {kind.name}")
            loop = asyncio.get_running_loop()
            while True:
                kind, length = decode_header(await conn.reader.readexactly(HEADER_SIZE), self.max_frame)
                payload = await conn.reader.readexactly(length) if length else b""
                if isinstance(role, Member):
                    role.last_heard = loop.time()
                if kind is Kind.HEARTBEAT:
                    pass  # (hearing it was the point)
                elif kind is Kind.FORWARD:
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
        except asyncio.IncompleteReadError:
            pass
        except (ConnectionError, OSError):
            broke = True
        finally:
            self._strangers.left(task)
            # (an ended connection must not stay referenced here with its buffers: every
            # connection ever made did, so a flood of strangers was never given back)
            self._handlers.pop(task, None)
            if job is not None:
                self._disconnected(job, role, broke)
            conn.close()

    async def _read_first(self, conn: Connection) -> tuple[Kind, dict[str, Any]]:
        """A request of a connection that has not said who it is (see ``strangers.py``)."""
        kind, length = decode_header(await conn.reader.readexactly(HEADER_SIZE), self.max_frame)
        return kind, decode_body(kind, await self._strangers.read_body(conn, length) if length else b"")

    async def _forward(self, job: Job, role: Job | Member, payload: bytes) -> None:
        """Pass a chunk of a relayed link on to its destination rank (see the module docstring)."""
        if not isinstance(role, Member) or not job.world_published:
            raise Refused("protocol", "FORWARD is for members of a job whose world is published")
        if len(payload) < FORWARD_RANK.size:
            raise ProtocolError("FORWARD frame without a rank")
        (dest,) = FORWARD_RANK.unpack_from(payload)
        chunk = memoryview(payload)[FORWARD_RANK.size :]
        if self._hold(job, role.rank, dest, chunk):  # (a rank of a resumed job, not back yet)
            return
        if job.shard is not None and 0 <= dest < job.size and not job.owns(dest):
            if job.members.get(role.rank) is role:  # (else a connection a reconnect replaced: stale)
                await self._to_shard(job, role.rank, dest, chunk)
            return
        target = job.members.get(dest)
        if self._stale(job, role, target):
            return  # (the stream broke with a connection and starts over: reconnect.py)
        reason = None
        if target is None:
            reason = absent_reason(job, dest)
        elif dest == role.rank:
            reason = "unknown"
        elif target.finished is not None:
            reason = "finished"
        elif target.left:
            reason = "lost"
        if reason is not None:
            if dest not in role.told_undeliverable:
                role.told_undeliverable.add(dest)
                what = {"unknown": "is not a member of this job", "finished": "has finalized", "lost": "is gone"}[reason]
                role.conn.send(Kind.UNDELIVERABLE, {"rank": dest, "reason": reason, "message": f"rank {dest} {what}"})
            return
        await self._deliver(job, dest, target.conn, role.rank, chunk)


class RelayThread:
    """A relay running on its own event loop in a daemon thread (what fmpirun embeds)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self.server = RelayServer(host, port, **options)
        ready = threading.Event()
        self._error: BaseException | None = None

        def run() -> None:
            # Writing to a rank that just died must fail with EPIPE, not kill the
            # process hosting the relay, even if that process restored the default
            # SIGPIPE action: SIGPIPE raised by this thread's writes stays pending
            # on it, blocked.
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


def server_tls_context(cert: str, key: str | None = None) -> ssl.SSLContext:
    """The relay's TLS context from a PEM certificate (chain) and its private key (TLS 1.2 or newer)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context
