"""Redis as a rank's relay line: relayed chunks and notices in Redis lists, spoken directly.

After the world, the transport talks to the rendezvous service through a
relay line (``transport/relay_line.py``: forward a frame to a rank, send a
control message, hear chunks and notices). This is that line with Redis
behind it; nothing is encoded in fmpi-relay's byte protocol on the way:

* writing (any thread): a frame for another rank is queued as its parts,
  without a copy (they are the stream's own: a small message's copy, or a
  large one's buffer, which its send keeps until the peer acknowledged
  it; the stream's flow control bounds them), so ``forward`` never blocks.
  Control messages queue behind the frames written before them.
* the uplink thread takes the queue in order: frames are cut into chunks
  and sealed (the one copy) and RPUSHed to each destination's mailbox, one
  script call per destination and batch; a LOOKUP is answered from the
  job's members hash (PEERS); FINISHED / OUTPUT / LINK become launcher
  events; ABORT is published to every rank's inbox. A chunk for a rank that
  finalized comes back once as UNDELIVERABLE, as fmpi-relay answers.
* the downlink thread blocks popping the rank's inbox and mailbox (no
  polling), opens what it pops and queues it for the progress thread,
  which a doorbell wakes (one end of a socketpair is the ``sock`` the
  progress loop watches). It stops popping while the engine has not taken
  ``INBOUND_LIMIT`` bytes, as a full socket would hold a sender back.

Everything written is sealed and everything read is opened with the job's
key (``redis_seal.py``): what does not open, or is a replay, is dropped and
logged once; relayed data that skips a sequence number is an ERROR.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from typing import Any, Callable

from ..util.byteparts import take_parts
from ..wire.relay_protocol import Kind, abort_cause, lookup_ranks
from .redis import RedisRank
from .redis_connect import explain
from .redis_keys import DEFAULT_TTL
from .redis_mailbox import FINISHED, JOB_GONE, RankMailbox
from .redis_seal import DATA, Refused, StreamGap
from .urls import safe_url

PUSH_BYTES = 1 << 20  # a large message's chunks go to Redis this many bytes at a time
INBOUND_LIMIT = 8 << 20  # opened bytes the engine has not taken yet, before the downlink stops popping
_FORWARD = object()  # marks a relayed frame in the queues (a control message is a Kind)


class RedisLine:
    """The relay line of a registered `member` (whose Redis clients it takes over)."""

    def __init__(self, member: RedisRank, chunk: int = 256 * 1024, ttl: int = DEFAULT_TTL) -> None:
        self._member = member
        self._where = safe_url(member.url)
        self._chunk = chunk
        member.follow_slot()
        commands, blocking = member.hand_over()
        self._box = RankMailbox(commands, blocking, member.job, member.rank, member.sealer, ttl)
        self.sock, self._bell = socket.socketpair()  # the progress loop watches `sock`; `_bell` rings it
        self.sock.setblocking(False)
        self.wlock = threading.Lock()
        self.bytes_in = self.bytes_out = 0
        self.last_heard = time.monotonic()
        self.beats_heard = False  # (Redis does not answer heartbeats: a lost Redis shows as a failed command)
        self.lost = False
        self._on_forward: Callable[[int, memoryview], None] | None = None
        self._on_control: Callable[[Kind, dict[str, Any]], None] | None = None
        # uplink: what the engine wrote, in order
        self._out: list[tuple[Any, Any, Any]] = []
        self._out_cond = threading.Condition()
        self._sending = False
        self._closing = False
        self._up_done = False
        self._told: set[int] = set()  # destinations already answered with UNDELIVERABLE
        # downlink: what the engine has not taken yet
        self._in: deque[tuple[Any, Any, Any]] = deque()
        self._in_bytes = 0
        self._in_cond = threading.Condition()
        self._rung = False
        self._stopping = threading.Event()
        self._up = threading.Thread(target=self._uplink, name="fmpi-redis-up", daemon=True)
        self._down = threading.Thread(target=self._downlink, name="fmpi-redis-down", daemon=True)

    def bind(self, on_forward: Callable[[int, memoryview], None], on_control: Callable[[Kind, dict[str, Any]], None]) -> None:
        self._on_forward, self._on_control = on_forward, on_control
        self._down.start()
        self._up.start()

    # ------------------------------------------------------------ the engine's side
    def forward(self, dest: int, parts: list[memoryview], token: object | None) -> bool:
        with self.wlock:
            return self.forward_held(dest, parts, token)

    def forward_held(self, dest: int, parts: list[memoryview], token: object | None) -> bool:
        self.bytes_out += sum(map(len, parts))
        self._queue(_FORWARD, dest, parts)
        return True

    def send_control(self, kind: Kind, body: dict[str, Any] | None = None) -> bool:
        if kind is not Kind.HEARTBEAT:  # (a lost Redis fails the next command; nothing to beat for)
            self._queue(kind, body or {}, None)
        return True

    def flush(self) -> tuple[list[object], bool]:
        return [], True  # (nothing is ever left for the progress thread to write)

    def has_queued(self) -> bool:
        return False

    def on_readable(self) -> None:
        """Progress thread: hand the engine what the downlink (and the uplink's answers) queued."""
        try:
            if not self.sock.recv(64):
                raise ConnectionError("the Redis line was closed")
        except (BlockingIOError, InterruptedError):
            pass
        with self._in_cond:
            events, self._in = self._in, deque()
            self._in_bytes = 0
            self._rung = False
            self._in_cond.notify_all()
        if events:
            self.last_heard = time.monotonic()
        assert self._on_forward is not None and self._on_control is not None
        for what, first, second in events:
            if what is _FORWARD:
                self.bytes_in += len(second)
                with memoryview(second) as chunk:
                    self._on_forward(first, chunk)
            else:
                self._on_control(what, first)

    def drain(self, timeout: float) -> bool:
        """Block until everything written so far reached Redis (or the uplink died)."""
        with self._out_cond:
            return self._out_cond.wait_for(lambda: not (self._out or self._sending) or self._up_done, timeout)

    def close_gracefully(self, timeout: float = 2.0) -> None:
        """After the last message: let it reach Redis, then stop both threads and close."""
        self.drain(timeout)
        with self._out_cond:
            self._closing = True
            self._out_cond.notify_all()
        self._up.join(timeout)
        self._stop()

    # ------------------------------------------------------------ uplink
    def _queue(self, what: Any, first: Any, second: Any) -> None:
        with self._out_cond:
            self._out.append((what, first, second))
            if len(self._out) == 1:
                self._out_cond.notify()

    def _uplink(self) -> None:
        try:
            while True:
                with self._out_cond:
                    self._out_cond.wait_for(lambda: self._out or self._closing)
                    if not self._out:
                        return
                    batch, self._out = self._out, []
                    self._sending = True
                self._send(batch)
                with self._out_cond:
                    self._sending = False
                    self._out_cond.notify_all()
        except Exception as exc:  # noqa: BLE001 - a Redis error: the rank must hear it, not hang
            self._tell(Kind.ERROR, {"code": "lost", "message": f"lost Redis at {self._where}: {explain(exc)}"})
        finally:
            with self._out_cond:
                self._sending = False
                self._up_done = True
                self._out_cond.notify_all()

    def _send(self, batch: list[tuple[Any, Any, Any]]) -> None:
        """Act on what the engine wrote, in order (chunks per destination go out before any control message).

        A destination's chunks are pushed once ``PUSH_BYTES`` gathered: the receiver pops the first ones while
        the rest of a large message is sealed."""
        pending: dict[int, list[Any]] = {}
        gathered: dict[int, int] = {}  # bytes in pending[dest]
        for what, first, second in batch:
            if what is _FORWARD:
                chunks = pending.setdefault(first, [])
                for chunk in self._chunks(second):
                    chunks.append(chunk)
                    gathered[first] = gathered.get(first, 0) + len(chunk)
                    if gathered[first] >= PUSH_BYTES:
                        self._flush({first: chunks})
                        gathered[first] = 0
            else:
                gathered.clear()
                self._flush(pending)
                self._control(what, first)
        self._flush(pending)

    def _chunks(self, parts: list[memoryview]) -> list[Any]:
        """A frame cut into chunks of at most `chunk` bytes, each one buffer for sealing (joined only if it spans
        several parts)."""
        out = []
        total = sum(map(len, parts))
        while total > 0:
            n = min(total, self._chunk)
            piece, parts = take_parts(parts, n)
            out.append(piece[0] if len(piece) == 1 else b"".join(piece))
            total -= n
        return out

    def _flush(self, pending: dict[int, list[Any]]) -> None:
        """Push and empty each destination's list of chunks."""
        for dest, items in pending.items():
            if dest in self._told or not items:
                items.clear()
                continue
            result = self._box.push(dest, items)
            items.clear()
            if result in (FINISHED, JOB_GONE):
                self._told.add(dest)
                reason = "finished" if result == FINISHED else "lost"
                what = "has finalized" if result == FINISHED else "is gone (the job ended)"
                self._tell(Kind.UNDELIVERABLE, {"rank": dest, "reason": reason, "message": f"rank {dest} {what}"})

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
            with self._in_cond:  # (the engine takes its time: hold further chunks in Redis meanwhile)
                self._in_cond.wait_for(lambda: self._in_bytes < INBOUND_LIMIT or self._stopping.is_set())
            if self._stopping.is_set():
                return
            try:
                what, items = self._box.next()
            except Exception as exc:  # noqa: BLE001 - the connection to Redis broke
                if not self._stopping.is_set():
                    self._tell(Kind.ERROR, {"code": "lost", "message": f"lost Redis at {self._where}: {explain(exc)}"})
                return
            if what == "chunks":
                self._post([(_FORWARD, src, chunk) for src, chunk in self._opened(items)])
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

    def _opened(self, items: list[bytes]) -> list[tuple[int, bytes]]:
        """(sender, chunk) of the sealed `items`: what is not ours is refused (logged), a gap is an error."""
        chunks = []
        for item in items:
            try:
                chunks.append(self._member.opener.open(DATA, item, ordered=True))
            except StreamGap as exc:
                self._tell(Kind.ERROR, {"code": "lost", "message": f"Redis at {self._where}: {exc}"})
            except Refused as exc:
                self._member.refused.say(f"{exc} (on {self._box.mbox})")
        return chunks

    # ------------------------------------------------------------ helpers
    def _tell(self, kind: Kind, body: dict[str, Any]) -> None:
        self._post([(kind, body, None)])

    def _post(self, events: list[tuple[Any, Any, Any]]) -> None:
        """Queue `events` for the progress thread and ring its doorbell (once until it has looked)."""
        if not events:
            return
        with self._in_cond:
            self._in.extend(events)
            self._in_bytes += sum(len(e[2]) for e in events if e[0] is _FORWARD)
            if self._rung:
                return
            self._rung = True
        try:
            self._bell.send(b"\1")
        except OSError:
            pass  # the line is closed: the rank is going away

    def _stop(self) -> None:
        """End the downlink and close everything."""
        self._stopping.set()
        with self._in_cond:
            self._in_cond.notify_all()
        if self._down.is_alive():
            try:
                self._box.wake()
            except Exception:  # noqa: BLE001 - Redis is gone: the pop fails on its own
                pass
            self._down.join(5.0)
        for sock in (self._bell, self.sock):
            sock.close()
        self._box.close()
