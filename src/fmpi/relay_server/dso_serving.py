"""fmpi-relay's DSO connections: DSO_ATTACH, then DSO_CALL frames served by the job's ``dso.Store``.

connections (DSO_ATTACH with the job's token) and call methods of named
objects (mailboxes, barriers, reducers, counters, maps) that run here, one
at a time. Calls carry request ids, so a client may pipeline them; a call
that must wait (a take on an empty mailbox, a barrier or reduction not yet
complete) parks an asyncio future, nothing more. A relay that only hosts
objects of a job (one node of several sharing a job's objects) gets the job
with DSO_CREATE: a job without rank slots that lives as long as that
connection. A job's objects are freed when it ends or aborts.

A DSO_CALL larger than the relay's value limit is read and dropped with a
``too_large`` reply; the connection stays up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..wire.relay_protocol import (
    DSO_PREFIX,
    HEADER_SIZE,
    Kind,
    ProtocolError,
    decode_dso,
    decode_header,
)
from .dso.objects import DsoError, Reply
from .dso.store import Store
from .records import (
    Connection,
    DsoSession,
    Job,
    Refused,
    live_job,
)

log = logging.getLogger("fmpi.relay")


class DsoServing:
    """A mixin of ``RelayServer``: serving a job's DSO connections (see the module docstring)."""

    jobs: dict[str, Job]
    max_frame: int
    dso_max_value: int
    dso_job_bytes: int
    dso_max_frame: int
    forward_high_water: int
    forward_stall_timeout: float

    def _dso_attach(self, conn: Connection, body: dict[str, Any]) -> tuple[Job, DsoSession]:
        job = live_job(self.jobs, body)
        if job.aborted:
            raise Refused("aborted", f"job {job.id!r} was aborted")
        session = DsoSession(conn)
        job.dso_sessions.add(session)
        conn.send(Kind.DSO_ATTACHED, {"job": job.id, "max_value": self.dso_max_value, "max_bytes": self.dso_job_bytes})
        return job, session

    async def _dso_serve(self, job: Job, session: DsoSession) -> None:
        """Read DSO_CALL frames until the client leaves (raises like the main loop on bad input)."""
        conn = session.conn
        try:
            while True:
                kind, length = decode_header(await conn.reader.readexactly(HEADER_SIZE), 0xFFFFFFFF)
                if kind is not Kind.DSO_CALL:
                    if length > self.max_frame:
                        raise ProtocolError(f"frame of {length} bytes exceeds the limit of {self.max_frame} bytes")
                    raise Refused("protocol", f"{kind.name} is not a valid request on a DSO connection")
                if length > self.dso_max_frame:
                    await self._dso_oversize(session, length)
                    continue
                self._dso_call(job, session, await conn.reader.readexactly(length))
                if conn.backlog() > self.forward_high_water:
                    # a client that pipelines calls without reading the replies is read no further until it does
                    try:
                        await asyncio.wait_for(conn.writer.drain(), self.forward_stall_timeout)
                    except asyncio.TimeoutError:
                        log.warning("job %s: a DSO client does not read its replies; dropping it", job.id)
                        conn.writer.transport.abort()
                        return
        finally:
            job.dso_sessions.discard(session)
            for fut in list(session.pending):
                fut.cancel()  # the objects skip cancelled waiters: nothing is handed to a client that is gone
            if job.dso is not None:
                job.dso.disconnected(session)  # (a window lock of a client that was killed is freed)

    async def _dso_oversize(self, session: DsoSession, length: int) -> None:
        reader = session.conn.reader
        prefix = await reader.readexactly(DSO_PREFIX.size) if length >= DSO_PREFIX.size else b""
        left = length - len(prefix)
        while left:
            left -= len(await reader.readexactly(min(left, 1 << 20)))
        if prefix:
            request, _ = DSO_PREFIX.unpack(prefix)
            value = length - DSO_PREFIX.size
            session.conn.send_dso(request, {"error": "too_large", "message": (
                f"a DSO call of {value} bytes exceeds this relay's value limit of {self.dso_max_value} bytes")})

    def _dso_call(self, job: Job, session: DsoSession, body: bytes) -> None:
        request, meta, value = decode_dso(body)
        conn = session.conn
        try:
            if job.over or job.aborted:
                raise DsoError("aborted" if job.aborted else "job_over", f"job {job.id!r} {'was aborted' if job.aborted else 'ended'}")
            args = meta.get("args", {})
            if not isinstance(args, dict):
                raise DsoError("bad_request", "args must be a JSON object")
            if job.dso is None:
                job.dso = Store(asyncio.get_running_loop().create_future, max_bytes=self.dso_job_bytes, max_value=self.dso_max_value)
            result = job.dso.call(meta.get("type"), meta.get("name"), meta.get("method"), args, value, session)
        except DsoError as exc:
            conn.send_dso(request, {"error": exc.code, "message": str(exc)})
            return
        if isinstance(result, Reply):
            conn.send_dso(request, {"ok": True, **result.meta}, result.payload)
            return
        session.pending.add(result)
        timer = None
        timeout = meta.get("timeout")
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout >= 0:
            timer = asyncio.get_running_loop().call_later(min(float(timeout), 86400.0), _expire, result, float(timeout))

        def done(fut: asyncio.Future) -> None:
            session.pending.discard(fut)
            if timer is not None:
                timer.cancel()
            if fut.cancelled():
                return
            exc = fut.exception()
            if exc is not None:
                code = exc.code if isinstance(exc, DsoError) else "error"
                conn.send_dso(request, {"error": code, "message": str(exc)})
            else:
                reply = fut.result()
                conn.send_dso(request, {"ok": True, **reply.meta}, reply.payload)

        result.add_done_callback(done)


def _expire(fut: asyncio.Future, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(DsoError("timeout", f"the call did not complete within {timeout:g} s"))
