"""A job whose rendezvous is sharded over several relays: the links between its shards and what travels on them.

Why: at thousands of ranks one relay process held every registration, every
LOOKUP and every relayed chunk of a job. With ``FMPI_SHARD_RENDEZVOUS=1`` and
``tcp://a,b,c`` the launcher creates the job on each of the k relays with its
place (``shard_state.py``); rank r registers at relay ``r % k``, which keeps
its record and its carrier connection. The shards talk over *shard links*,
one outgoing link per ordered pair of shards of a job (each shard writes on
its own links and reads the others'), so frames from one shard to another
stay in order:

* a link opens with SHARD_HELLO carrying the job's token, the secret every
  rank registers with: a relay that does not hold the job with that token
  refuses it (a stranger cannot pose as a shard to read or inject a job's
  traffic); over ``tls://`` the link is TLS and checks the other relay's
  certificate as ranks do;
* world: when every slot of a shard is taken it sends its ranks' records to
  the others (``records``, the last frame ``full``); a shard publishes the
  WORLD to its own ranks once it is full and has heard ``full`` from every
  other. A rank that leaves before its world un-fills its shard (``unfull``).
  So each shard ends up with every record, and a LOOKUP is answered by the
  asker's own relay;
* a FORWARD to a rank of another shard goes on as SHARD_FORWARD (source,
  destination, chunk); the shard holding the destination delivers it, or
  answers ``undeliverable`` to the source's shard, as a single relay would;
  a link whose reader falls behind stops the sender as a rank would;
* a rank's ABORT, a lost rank (PEER_LOST) and a reconnected one (PEER_BACK,
  RESYNCED) reach the ranks of every shard.

A shard link that is refused or breaks fails the job (``shard_lost``): a
sharded job does not outlive the loss of one of its relays (a restarted
relay cannot take its part back; ``FMPI_RELAY_REJOIN`` does not apply).

A mixin of ``RelayServer`` through ``jobs.JobLifecycle``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Any, Callable

from .. import settings
from ..wire.relay_protocol import (
    HEADER_SIZE,
    MAX_CLIENT_FRAME,
    MAX_SERVER_FRAME,
    SHARD_FORWARD_RANKS,
    Kind,
    ProtocolError,
    abort_cause,
    decode_body,
    decode_header,
    encode,
    peer_record,
    shard_forward_header,
)
from .records import Connection, Job, Member, Refused, live_job
from .shard_state import ShardState, parse_shards

log = logging.getLogger("fmpi.relay")

RECORDS_PER_FRAME = 2048  # records of one frame to another shard (about 100 bytes each)
CONNECT_FOR = 10.0  # seconds a link keeps trying a relay that does not hold the job yet (created on each in turn)
RETRY_FIRST, RETRY_MAX = 0.05, 2.0  # seconds between attempts, doubling: a handful in all, not a flood
LOST_GRACE = 1.0  # seconds between a shard link's loss and failing the job, unless it ended meanwhile
WHAT = {"unknown": "is not a member of this job", "finished": "has finalized", "lost": "is gone"}


async def _read_frame(reader: asyncio.StreamReader) -> tuple[Kind, dict[str, Any]]:
    kind, length = decode_header(await reader.readexactly(HEADER_SIZE), MAX_CLIENT_FRAME)
    return kind, decode_body(kind, await reader.readexactly(length) if length else b"")


class ShardLink:
    """Our outgoing link to one other shard of a job: frames go in order; refused or lost, ``on_lost(why)``."""

    def __init__(self, address: tuple[str, int], tls: bool, hello: bytes, on_lost: Callable[[str], None]) -> None:
        self.address = address
        self._tls = tls
        self._hello = hello
        self._on_lost = on_lost
        self._pending: list[bytes] = []  # written once the other shard accepted the link
        self.writer: asyncio.StreamWriter | None = None
        self._closed = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    def send(self, *parts: bytes | memoryview) -> None:
        if self.writer is None:
            self._pending.extend(bytes(p) for p in parts)
        elif not self.writer.is_closing():
            self.writer.writelines(parts)

    def backlog(self) -> int:
        return 0 if self.writer is None else self.writer.transport.get_write_buffer_size()

    async def drain(self) -> None:
        if self.writer is not None:
            await self.writer.drain()

    def close(self) -> None:
        self._closed = True
        self._task.cancel()
        if self.writer is not None and not self.writer.is_closing():
            self.writer.close()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | str:
        """Connect and say hello until the other shard accepts (or it refuses for good): the streams, or why not."""
        host, port = self.address
        loop = asyncio.get_running_loop()
        give_up = loop.time() + CONNECT_FOR
        context = ssl.create_default_context(cafile=settings.tls_ca()) if self._tls else None
        pause = RETRY_FIRST
        while True:
            why, retry = "", False
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None), CONNECT_FOR)
                writer.write(self._hello)
                kind, body = await asyncio.wait_for(_read_frame(reader), CONNECT_FOR)
                if kind is Kind.SHARD and body.get("type") == "hello":
                    return reader, writer
                writer.close()
                why = f"it refused this job's shard link: {body.get('message', kind.name)}"
                retry = body.get("code") == "unknown_job"  # (the launcher has not created the job there yet)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ProtocolError) as exc:
                why, retry = f"cannot reach it: {exc or type(exc).__name__}", True
            if not retry or loop.time() > give_up:
                return f"the relay at {host}:{port}, which holds other ranks of the job: {why}"
            await asyncio.sleep(pause)
            pause = min(2 * pause, RETRY_MAX)

    async def _run(self) -> None:
        opened = await self._open()
        if isinstance(opened, str):
            return self._lost(opened)
        reader, writer = opened
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        writer.writelines(self._pending)
        self._pending, self.writer = [], writer
        try:
            await reader.read(1)  # (the other shard writes nothing more here: its end or a frame means it is gone)
        except (OSError, ConnectionError):
            pass
        self._lost("lost the link to the relay at {}:{}, which holds other ranks of the job".format(*self.address))

    def _lost(self, why: str) -> None:
        if not self._closed:
            self._closed = True
            self._on_lost(why)


class ShardRelaying:
    """The shard links of this relay's sharded jobs (see the module docstring)."""

    jobs: dict[str, Job]
    forward_high_water: int
    forward_stall_timeout: float
    _publish_world: Callable[[Job], None]
    _fail: Callable[..., None]
    _abort: Callable[..., None]
    _notify_lost: Callable[..., None]

    def _shard_setup(self, job: Job, raw: Any) -> None:
        job.shard = parse_shards(raw, job.id)
        job.quota = job.shard.quota(job.size)

    def _shard_open(self, job: Job) -> None:
        """Open the links to the other shards now, off the path of the last registration (connecting under the
        load of thousands of ranks took half a second there)."""
        for index in job.shard.others():
            self._shard_link(job, index)

    def _shard_link(self, job: Job, index: int) -> ShardLink:
        st: ShardState = job.shard
        link = st.links.get(index)
        if link is None:
            hello = encode(Kind.SHARD_HELLO, {"job": job.id, "token": job.token, "shard": st.index})
            link = st.links[index] = ShardLink(st.relays[index], st.tls, hello, lambda why: self._shard_lost(job, why))
        return link

    def _shard_send(self, job: Job, index: int, body: dict[str, Any]) -> None:
        self._shard_link(job, index).send(encode(Kind.SHARD, body))

    def _shard_broadcast(self, job: Job, body: dict[str, Any]) -> None:
        frame = encode(Kind.SHARD, body)
        for index in job.shard.others():
            self._shard_link(job, index).send(frame)

    def _shard_lost(self, job: Job, why: str) -> None:
        """A link to another shard failed: fail the job, after a moment (the launcher ends a job on its relays one
        after the other, and one that ended first closes its links: that is no failure)."""
        asyncio.get_running_loop().call_later(LOST_GRACE, self._shard_fail, job, why)

    def _shard_fail(self, job: Job, why: str) -> None:
        if not job.over:
            log.warning("job %s: %s; failing the job", job.id, why)
            self._fail(job, "shard_lost", f"job {job.id!r} lost one of its relays: {why}")

    def _shard_end(self, job: Job) -> None:
        """The job is over here: close our links and the other shards' links to us."""
        job.shard.world.set()  # (a chunk that waits for the world waits no more: it is dropped)
        for link in job.shard.links.values():
            link.close()
        for conn in list(job.shard.incoming):
            conn.close()

    # ------------------------------------------------------------------ world
    def _filled(self, job: Job, member: Member | None = None) -> None:
        """`member` registered. A sharded job's other shards get its record soon (records go out as ranks register,
        a batch per turn of the event loop, so that the last registration sends little), and once every slot here
        is taken they hear we are full; the world is published when they all are."""
        st: ShardState | None = job.shard
        full = len(job.members) == job.quota
        if st is not None:
            if member is not None:
                st.outbox.append(peer_record(member.rank, member.endpoints, member.observed, member.probe))
            if full:
                st.told_full = True
                self._shard_flush(job, full=True)
            elif len(st.outbox) >= RECORDS_PER_FRAME:
                self._shard_flush(job)
            elif len(st.outbox) == 1:
                asyncio.get_running_loop().call_soon(self._shard_flush, job)
        if full:
            self._maybe_world(job)

    def _shard_flush(self, job: Job, full: bool = False) -> None:
        """Send the records not sent yet to the other shards (with `full`: and that every slot here is taken)."""
        st: ShardState = job.shard
        if job.over or not (st.outbox or full):
            return
        records, st.outbox = st.outbox, []
        body: dict[str, Any] = {"type": "records", "records": records}
        if full:
            body["full"] = True
        self._shard_broadcast(job, body)

    def _unfilled(self, job: Job) -> None:
        """A rank left before the world: this shard is no longer full."""
        if job.shard is not None and job.shard.told_full:
            job.shard.told_full = False
            self._shard_broadcast(job, {"type": "unfull"})

    def _maybe_world(self, job: Job) -> None:
        if job.world_published or job.over or len(job.members) != job.quota:
            return
        if job.shard is not None and len(job.shard.full_from) != job.shard.count - 1:
            return
        self._publish_world(job)
        if job.shard is not None:
            job.shard.world.set()

    # ------------------------------------------------------------- the other shards' links to us
    def _shard_attach(self, conn: Connection, body: dict[str, Any]) -> tuple[Job, int]:
        """A SHARD_HELLO: another relay of a sharded job, proving it with the job's token."""
        job = live_job(self.jobs, body)
        st: ShardState | None = job.shard
        if st is None:
            raise Refused("protocol", f"job {job.id!r} is not sharded over several relays")
        index = body["shard"]
        if not 0 <= index < st.count or index == st.index:
            raise Refused("bad_request", f"shard {index} is not another shard of job {job.id!r} ({st.count} shards)")
        st.incoming.add(conn)
        conn.send(Kind.SHARD, {"type": "hello"})
        return job, index

    async def _shard_serve(self, job: Job, sender: int, conn: Connection) -> None:
        try:
            while True:
                kind, length = decode_header(await conn.reader.readexactly(HEADER_SIZE), MAX_SERVER_FRAME)
                payload = await conn.reader.readexactly(length) if length else b""
                if kind is Kind.SHARD_FORWARD:
                    await self._from_shard(job, payload)
                elif kind is Kind.SHARD:
                    self._shard_message(job, sender, decode_body(kind, payload))
                else:
                    raise ProtocolError(f"{kind.name} is not a frame of a shard link")
        finally:
            job.shard.incoming.discard(conn)

    def _shard_message(self, job: Job, sender: int, body: dict[str, Any]) -> None:
        if job.over:
            return
        st: ShardState = job.shard
        kind = body["type"]
        if kind == "records":
            for record in body.get("records") or []:
                rank = record.get("rank") if isinstance(record, dict) else None
                if isinstance(rank, int) and 0 <= rank < job.size and st.owner(rank) == sender:
                    st.records[rank] = record
            if body.get("full") is True:
                st.full_from.add(sender)
                self._maybe_world(job)
        elif kind == "unfull":
            st.full_from.discard(sender)
        elif kind == "abort":
            self._abort(job, _int(body, "code"), str(body.get("reason", "")), _int(body, "origin"),
                        abort_cause(body.get("cause")), from_shard=True)
        elif kind == "lost":
            st.lost.add(_int(body, "rank"))
            self._notify_lost(job, _int(body, "rank"), from_shard=True)
        elif kind == "peer_back":
            for m in job.members.values():
                if not m.left and m.away_since is None:
                    m.conn.send(Kind.PEER_BACK, {"rank": _int(body, "rank")})
        elif kind == "resynced":
            target = job.members.get(_int(body, "rank"))
            if target is not None:
                target.resync_from.discard(_int(body, "by"))
        elif kind == "undeliverable":
            member = job.members.get(_int(body, "to"))
            if member is not None and not member.left and isinstance(body.get("notice"), dict):
                member.conn.send(Kind.UNDELIVERABLE, body["notice"])
        else:
            raise ProtocolError(f"unknown shard message {kind[:40]!r}")

    # ------------------------------------------------------------------ relayed chunks across shards
    async def _to_shard(self, job: Job, source: int, dest: int, chunk: memoryview) -> None:
        """A member's chunk for a rank another shard holds: on over our link to it (the sender waits if it lags)."""
        link = self._shard_link(job, job.shard.owner(dest))
        link.send(shard_forward_header(source, dest, len(chunk)), chunk)
        if link.backlog() > self.forward_high_water:
            try:
                await asyncio.wait_for(link.drain(), self.forward_stall_timeout)
            except asyncio.TimeoutError:
                self._shard_lost(job, "the relay at {}:{} does not read the job's relayed frames".format(*link.address))
            except (ConnectionError, OSError):
                pass

    async def _from_shard(self, job: Job, payload: bytes) -> None:
        """A chunk another shard relays to one of our members (or why it cannot reach it, back to the sender)."""
        if len(payload) < SHARD_FORWARD_RANKS.size:
            raise ProtocolError("SHARD_FORWARD frame without its ranks")
        source, dest = SHARD_FORWARD_RANKS.unpack_from(payload)
        st: ShardState = job.shard
        if not st.world.is_set():
            # The sender's relay has every shard full, but the last "full" may still be on its way to us: this
            # link waits (in order) until our ranks have their WORLD, which must reach them before any chunk.
            await st.world.wait()
        if job.over:
            return
        target = job.members.get(dest) if job.owns(dest) else None
        reason = "unknown" if target is None else "finished" if target.finished is not None else "lost" if target.left else None
        if reason is not None:
            if (source, dest) not in st.told and 0 <= source < job.size:
                st.told.add((source, dest))
                notice = {"rank": dest, "reason": reason, "message": f"rank {dest} {WHAT[reason]}"}
                self._shard_send(job, st.owner(source), {"type": "undeliverable", "to": source, "notice": notice})
            return
        assert target is not None
        if target.away_since is not None or source in target.resync_from or target.conn.writer.is_closing():
            return  # (its stream broke with a connection and starts over: reconnect.py)
        await self._deliver(job, dest, target.conn, source, memoryview(payload)[SHARD_FORWARD_RANKS.size :])

    async def _deliver(self, job: Job, dest: int, conn: Any, source: int, chunk: memoryview) -> None:
        """Hand `source`'s chunk to rank `dest`, connected here on `conn`; past the high-water mark wait for it to
        read (a rank that does not, within forward_stall_timeout, is dropped: it must not hold the relay's memory)."""
        conn.forward(source, chunk)
        if conn.backlog() > self.forward_high_water:
            try:
                await asyncio.wait_for(conn.writer.drain(), self.forward_stall_timeout)
            except asyncio.TimeoutError:
                log.warning("job %s: rank %d does not read its relayed frames; dropping it", job.id, dest)
                conn.writer.transport.abort()
            except (ConnectionError, OSError):
                pass

    # ------------------------------------------------------------------ reconnects
    def _shard_back(self, job: Job, member: Member) -> None:
        """`member` reconnected here: the other shards' ranks resync too, and it hears who of them is lost."""
        st: ShardState = job.shard
        member.resync_from |= {r for r in range(job.size) if st.owner(r) != st.index and r not in st.lost}
        for rank in st.lost:
            member.conn.send(Kind.PEER_LOST, {"rank": rank})
        self._shard_broadcast(job, {"type": "peer_back", "rank": member.rank})


def _int(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"a shard message needs an integer {key!r}")
    return value
