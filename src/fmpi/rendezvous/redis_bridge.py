"""Redis as a rank's relay connection: an in-process bridge that speaks the fmpi relay protocol.

The transport knows one kind of relay: a socket carrying relay-protocol
frames (control JSON, FORWARD chunks of relayed links). Rather than teach
it Redis, the rank hands the engine one end of a socketpair; this bridge
serves the other end as fmpi-relay would, with Redis behind it:

* uplink thread (engine -> Redis): reads frames from the socketpair.
  FORWARD chunks are RPUSHed to the destination's mailbox (per-destination
  batches, one script call each, order kept); a LOOKUP is answered from
  the job's members hash (PEERS); FINISHED / OUTPUT / LINK become launcher
  events; ABORT is published to every rank's inbox.
  A chunk for a rank that finalized comes back as one UNDELIVERABLE, as
  fmpi-relay answers.
* downlink thread (Redis -> engine): blocking pops on the rank's inbox and
  mailbox (no polling); chunks go to the engine as FORWARD frames stamped
  with their source, notices as ABORT / ERROR frames.

Everything written is sealed and everything read is opened with the job's
key (``redis_seal.py``): what does not open, or is a replay, is dropped and
logged once; relayed data that skips a sequence number is an ERROR.

When the engine closes its end (the rank finalized), the uplink finishes
what it read, stops the downlink and closes our end: the engine's graceful
close sees the EOF it waits for, so its last frames reached Redis first.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from ..wire.frame_reader import FrameReader
from ..wire.relay_protocol import (
    FORWARD_RANK,
    HEADER_SIZE,
    Kind,
    ProtocolError,
    abort_cause,
    decode_body,
    encode,
    forward_header,
    lookup_ranks,
)
from .redis import RedisRank
from .redis_connect import explain
from .redis_keys import DEFAULT_TTL
from .redis_mailbox import FINISHED, JOB_GONE, RankMailbox
from .redis_seal import DATA, Refused, StreamGap
from .urls import safe_url

READ_SIZE = 1 << 20


class RedisBridge:
    """Serves `engine_end`'s peer for a registered `member` (whose Redis clients it takes over)."""

    def __init__(self, member: RedisRank, ttl: int = DEFAULT_TTL) -> None:
        self._member = member
        self._where = safe_url(member.url)
        commands, blocking = member.hand_over()
        self._box = RankMailbox(commands, blocking, member.job, member.rank, member.sealer, ttl)
        self.engine_end, self._end = socket.socketpair()
        self._wlock = threading.Lock()  # both threads write frames to our end
        self._cond = threading.Condition()
        self._handled = 0  # bytes of engine frames acted on (settle() waits on it)
        self._told: set[int] = set()  # destinations already answered with UNDELIVERABLE
        self._stopping = threading.Event()
        self._up = threading.Thread(target=self._uplink, name="fmpi-redis-up", daemon=True)
        self._down = threading.Thread(target=self._downlink, name="fmpi-redis-down", daemon=True)

    def start(self) -> None:
        self._down.start()
        self._up.start()

    def settle(self, nbytes: int, timeout: float) -> bool:
        """Wait until the first `nbytes` the engine wrote reached Redis (before the process exits at once)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._handled >= nbytes or not self._up.is_alive(), timeout)

    # ------------------------------------------------------------- uplink
    def _uplink(self) -> None:
        reader = FrameReader()
        try:
            while True:
                data = self._end.recv(READ_SIZE)
                if not data:
                    break
                reader.feed(data)
                used = self._handle(reader)
                with self._cond:
                    self._handled += used
                    self._cond.notify_all()
        except (OSError, ProtocolError) as exc:
            self._tell(Kind.ERROR, {"code": "lost", "message": f"the Redis relay at {self._where} failed: {exc}"})
        except Exception as exc:  # noqa: BLE001 - a Redis error: the rank must hear it, not hang
            self._tell(Kind.ERROR, {"code": "lost", "message": f"lost Redis at {self._where}: {explain(exc)}"})
        finally:
            with self._cond:
                self._cond.notify_all()
            self._stop()

    def _handle(self, reader: FrameReader) -> int:
        """Act on every whole frame `reader` holds; returns the bytes they took on the wire."""
        used = 0
        pending: dict[int, list[bytes]] = {}  # dest -> chunks, flushed before any control frame
        while (frame := reader.next()) is not None:
            kind, body = frame
            used += HEADER_SIZE + len(body)
            if kind is Kind.FORWARD:
                if len(body) < FORWARD_RANK.size:
                    raise ProtocolError("FORWARD frame without a rank")
                (dest,) = FORWARD_RANK.unpack_from(body)
                # Sealed by the mailbox; the envelope names us, and the receiver's bridge stamps that on its FORWARD.
                pending.setdefault(dest, []).append(memoryview(body)[FORWARD_RANK.size :])
            else:
                self._flush(pending)
                self._control(kind, decode_body(kind, body))
        self._flush(pending)
        return used

    def _flush(self, pending: dict[int, list[bytes]]) -> None:
        for dest, items in pending.items():
            if dest in self._told:
                continue
            result = self._box.push(dest, items)
            if result in (FINISHED, JOB_GONE) and dest not in self._told:
                self._told.add(dest)
                reason = "finished" if result == FINISHED else "lost"
                what = "has finalized" if result == FINISHED else "is gone (the job ended)"
                self._tell(Kind.UNDELIVERABLE, {"rank": dest, "reason": reason, "message": f"rank {dest} {what}"})
        pending.clear()

    def _control(self, kind: Kind, body: dict[str, Any]) -> None:
        if kind is Kind.ABORT:
            self._member.abort(int(body["code"]), str(body["reason"]), abort_cause(body.get("cause")))
        elif kind is Kind.FINISHED:
            self._box.finished(int(body["code"]), body.get("links"))
        elif kind is Kind.OUTPUT:
            self._box.event({"type": "output", "stream": body["stream"], "data": body["data"]})
        elif kind is Kind.LOOKUP:
            self._tell(Kind.PEERS, self._member.lookup(lookup_ranks(body)))
        elif kind is Kind.LINK:
            self._box.event({
                "type": "link", "peer": body["peer"], "kind": body["kind"], "seconds": body["seconds"],
                "event": str(body.get("event", "up"))[:16],
            })
        # Anything else has no meaning after the world (fmpi-relay would refuse it); ignore.

    # ----------------------------------------------------------- downlink
    def _downlink(self) -> None:
        while True:
            try:
                what, items = self._box.next()
            except Exception as exc:  # noqa: BLE001 - the connection to Redis broke
                if not self._stopping.is_set():
                    self._tell(Kind.ERROR, {"code": "lost", "message": f"lost Redis at {self._where}: {explain(exc)}"})
                return
            if what == "chunks":
                if not self._write(self._opened(items)):
                    return
                continue
            try:
                notice = self._member.open_notice(items[0])
            except Refused as exc:
                self._member.refused.say(f"{exc} (on {self._box.inbox})")
                continue
            kind = notice.get("kind")
            if kind == "_stop":
                return
            if kind == "abort":
                self._tell(Kind.ABORT, {k: notice[k] for k in ("code", "reason", "rank", "cause") if k in notice})
            elif kind == "error":
                self._tell(Kind.ERROR, {"code": notice.get("code", "error"), "message": notice.get("message", "the job failed")})

    def _opened(self, items: list[bytes]) -> list[bytes | memoryview]:
        """FORWARD frames of the sealed chunks `items`: what is not ours is refused (logged), a gap is an error."""
        frames: list[bytes | memoryview] = []
        for item in items:
            try:
                src, chunk = self._member.opener.open(DATA, item, ordered=True)
            except StreamGap as exc:
                self._tell(Kind.ERROR, {"code": "lost", "message": f"Redis at {self._where}: {exc}"})
                continue
            except Refused as exc:
                self._member.refused.say(f"{exc} (on {self._box.mbox})")
                continue
            frames.append(forward_header(src, len(chunk)))
            frames.append(chunk)
        return frames

    # ------------------------------------------------------------ helpers
    def _tell(self, kind: Kind, body: dict[str, Any]) -> None:
        self._write([encode(kind, body)])

    def _write(self, parts: list[bytes | memoryview]) -> bool:
        with self._wlock:
            try:
                for part in parts:
                    self._end.sendall(part)
                return True
            except OSError:
                return False  # the engine closed its end: the rank is going away

    def _stop(self) -> None:
        """End both threads and close our end (the engine then sees EOF)."""
        self._stopping.set()
        if self._down.is_alive() and threading.current_thread() is not self._down:
            try:
                self._box.wake()
            except Exception:  # noqa: BLE001 - Redis is gone: the pop fails on its own
                pass
            self._down.join(5.0)
        try:
            self._end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._end.close()
        self._box.close()
