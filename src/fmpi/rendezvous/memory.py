"""An in-process rendezvous, ``memory://NAME``, for tests (like Gloo's HashStore): no server, same behaviour.

Ranks and the launcher of one process that name the same store meet in it.
It keeps fmpi-relay's rules (a slot is taken once, the last registrant
publishes the world, an unfilled world fails by its deadline naming the
missing ranks) and, after the world, serves each rank's carrier from a
socketpair: relayed chunks go to their destination, a LOOKUP is answered
from the job's members, FINISHED / LINK / OUTPUT become launcher events, an ABORT reaches every rank and the launcher.
Writes to a rank's carrier go through a queue and a thread of its own, so
one slow reader never stalls the others. Its name table (MPI name
publishing: ``MemoryNames``) follows fmpi-relay's too (``wire/names.py``).
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Any

from ..util.ranges import describe_ranks
from ..wire.errors import Aborted, RelayError
from ..wire.frame_reader import FrameReader
from ..wire.names import NameTable
from ..wire.relay_protocol import (
    FORWARD_RANK,
    Kind,
    ProtocolError,
    abort_cause,
    decode_body,
    encode,
    forward_header,
    lookup_ranks,
    peer_record,
    peers_answer,
)
from .protocols import Carrier, JobEvents, Registered
from .urls import parse

_stores: dict[str, "_Store"] = {}
_stores_lock = threading.Lock()


class _Job:
    def __init__(self, token: str, size: int, events: JobEvents) -> None:
        self.token, self.size, self.events = token, size, events
        self.state = "filling"  # filling | running | over
        self.members: dict[int, tuple[str, tuple[str, int], tuple[str, int]]] = {}  # rank -> incarnation, local, seen
        self.notice: RelayError | None = None  # what ended the job for the ranks (abort, failure)
        self.outboxes: dict[int, queue.SimpleQueue] = {}  # rank -> frames for its carrier (None: close it)
        self.finished: set[int] = set()
        self.any_slot: set[int] = set()  # slots taken by "any free slot" joins (spares): a pinned rank moves on
        self.created = time.monotonic()
        self.timer: threading.Timer | None = None


class _Store:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.jobs: dict[str, _Job] = {}
        self.names = NameTable()  # MPI name publishing (MemoryNames); a job's names end with it

    def job(self, job: str) -> _Job:
        found = self.jobs.get(job)
        if found is None:
            raise RelayError("no such job (it ended, or was never created)", "unknown_job")
        return found

    def notify_all(self, job: _Job, notice: RelayError, kind: Kind, body: dict[str, Any]) -> None:
        """End the job for every rank (held: `cond`): waiters raise `notice`, carriers get `kind`."""
        job.state, job.notice = "over", notice
        for box in job.outboxes.values():
            box.put(encode(kind, body))
        self.cond.notify_all()


def store(url: str) -> _Store:
    name = parse(url).first[0]
    with _stores_lock:
        return _stores.setdefault(name, _Store())


class MemoryRendezvous:
    """A rank's registration in an in-process store."""

    can_rejoin = False

    def __init__(self, url: str, job: str, token: str) -> None:
        self.url, self.job, self._token = url, job, token
        self._store = store(url)
        self._shared: socket.socket | None = None
        self._rank = -1

    def local_ip(self) -> str:
        return "127.0.0.1"

    def open(self, shared: socket.socket, timeout: float) -> None:
        self._shared = shared  # holds the rank's port until the world is out

    def register(self, rank: int, incarnation: str, timeout: float) -> Registered:
        if self._shared is None:
            raise RelayError("the rendezvous was not opened", "protocol")
        local = self._shared.getsockname()[:2]
        with self._store.cond:
            job = self._store.job(self.job)
            rank = self._take(job, rank, incarnation, local)
            joined = len(job.members)
            job.events.event("joined", {"rank": rank, "joined": joined, "size": job.size, "incarnation": incarnation})
            if joined == job.size:
                job.state = "running"
                self._store.cond.notify_all()
                job.events.event("world", {"seconds": round(time.monotonic() - job.created, 6)})
        self._rank = rank
        return Registered(rank, job.size, local, local, None, incarnation)

    def _take(self, job: _Job, rank: int, incarnation: str, local: tuple[str, int]) -> int:
        if job.token != self._token:
            raise RelayError("wrong token for this job", "auth")
        if job.state != "filling":
            raise RelayError("the job no longer takes ranks", "closed")
        any_slot = rank == -1
        free = next((r for r in range(job.size) if r not in job.members), -1)
        if any_slot:
            _joined_once(job, incarnation)
            rank = free
            if rank == -1:
                raise RelayError("the job is full", "duplicate")
        if not 0 <= rank < job.size:
            raise RelayError(f"rank {rank} is outside a job of {job.size} ranks", "bad_rank")
        if rank in job.any_slot and free != -1:
            _joined_once(job, incarnation)  # (moved once already: a second delivery is refused, not moved again)
            rank, any_slot = free, True  # a spare that started first holds this slot: take a free one, as a spare
        if rank in job.members:
            raise RelayError(
                f"rank {rank} is already registered (incarnation {job.members[rank][0]}); this duplicate is refused",
                "duplicate",
            )
        job.members[rank] = (incarnation, local, local)  # in one process, seen = where it is
        if any_slot:
            job.any_slot.add(rank)
        return rank

    def wait_world(self, deadline: float) -> int:
        with self._store.cond:
            job = self._store.job(self.job)
            ready = self._store.cond.wait_for(lambda: job.state != "filling", max(0.0, deadline - time.monotonic()) + 5.0)
            if job.notice is not None:
                raise job.notice
            if not ready:
                raise RelayError("the in-process rendezvous never published the world", "timeout")
            return job.size

    def carrier(self) -> Carrier:
        mine, theirs = socket.socketpair()
        with self._store.cond:
            job = self._store.job(self.job)
            box: queue.SimpleQueue = queue.SimpleQueue()
            job.outboxes[self._rank] = box
        _Serve(self._store, job, self._rank, theirs, box).start()
        self.close()
        return Carrier(mine)

    def rejoin(self, registered: Registered, timeout: float) -> Carrier | None:
        return None

    def close(self) -> None:
        if self._shared is not None:
            self._shared.close()
            self._shared = None


class _Serve:
    """The store's end of one rank's carrier: a reader thread and a writer thread."""

    def __init__(self, st: _Store, job: _Job, rank: int, sock: socket.socket, box: queue.SimpleQueue) -> None:
        self.store, self.job, self.rank, self.sock, self.box = st, job, rank, sock, box

    def start(self) -> None:
        threading.Thread(target=self._read, name=f"fmpi-memory-in-{self.rank}", daemon=True).start()
        threading.Thread(target=self._write, name=f"fmpi-memory-out-{self.rank}", daemon=True).start()

    def _write(self) -> None:
        while (frame := self.box.get()) is not None:
            try:
                self.sock.sendall(frame)
            except OSError:
                return

    def _read(self) -> None:
        reader = FrameReader()
        try:
            while data := self.sock.recv(1 << 16):
                reader.feed(data)
                while (frame := reader.next()) is not None:
                    self._handle(*frame)
        except (OSError, ProtocolError):
            pass
        self.box.put(None)  # the rank closed its end: so do we, after what is queued
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _handle(self, kind: Kind, payload: bytes) -> None:
        job = self.job
        if kind is Kind.FORWARD:
            (dest,) = FORWARD_RANK.unpack_from(payload)
            with self.store.cond:
                box = None if dest in job.finished else job.outboxes.get(dest)
            if box is None:
                body = {"rank": dest, "reason": "finished", "message": f"rank {dest} has finalized"}
                self.box.put(encode(Kind.UNDELIVERABLE, body))
            else:
                box.put(forward_header(self.rank, len(payload) - FORWARD_RANK.size) + payload[FORWARD_RANK.size :])
            return
        if kind is Kind.HEARTBEAT:
            return
        body = decode_body(kind, payload)
        if kind is Kind.LOOKUP:
            self.box.put(encode(Kind.PEERS, self._lookup(lookup_ranks(body))))
            return
        if kind is Kind.ABORT:
            notice = {"code": int(body["code"]), "reason": str(body["reason"]), "rank": self.rank,
                      "cause": abort_cause(body.get("cause"))}
            abort(self.store, job, notice)
        elif kind is Kind.FINISHED:
            with self.store.cond:
                job.finished.add(self.rank)
            job.events.event("finished", {"rank": self.rank, "code": int(body["code"]), "links": body.get("links")})
        elif kind in (Kind.LINK, Kind.OUTPUT):
            job.events.event("link" if kind is Kind.LINK else "output", {**body, "rank": self.rank})


    def _lookup(self, ranks: list[int]) -> dict[str, Any]:
        job, found, missing = self.job, [], {}
        with self.store.cond:
            for r in dict.fromkeys(ranks):
                member = job.members.get(r)
                if member is None:
                    missing[r] = f"rank {r} is outside a job of {job.size} ranks"
                else:
                    found.append(peer_record(r, [member[1]], member[2], None))
        return peers_answer(found, missing)


def abort(st: _Store, job: _Job, notice: dict[str, Any]) -> None:
    """Every rank and the launcher hear the abort (once the job is over, nothing more is said)."""
    exc = Aborted.from_body(notice)
    with st.cond:
        if job.state == "over":
            return
        st.notify_all(job, exc, Kind.ABORT, {k: v for k, v in notice.items() if v is not None})
    job.events.aborted(exc)


def _joined_once(job: _Job, incarnation: str) -> None:
    """Refuse an invocation that already holds a slot (one invocation delivered twice is one rank, not two)."""
    again = next((r for r, member in job.members.items() if member[0] == incarnation), None)
    if again is not None:
        raise RelayError(f"incarnation {incarnation} already joined this job as rank {again}; this duplicate is refused",
                         "duplicate")


class MemoryNames:
    """The store's name service: a caller proves a job of the store with its token, as at fmpi-relay."""

    def __init__(self, url: str, job: str, token: str) -> None:
        self._store, self._job, self._token = store(url), job, token

    def publish(self, name: str, port: str) -> None:
        with self._store.cond:
            self._check_job()
            self._store.names.publish(self._job, name, port)

    def unpublish(self, name: str, port: str) -> None:
        with self._store.cond:
            self._check_job()
            self._store.names.unpublish(name, port)

    def lookup(self, name: str) -> str:
        with self._store.cond:
            self._check_job()
            return self._store.names.lookup(name)

    def _check_job(self) -> None:
        if self._store.job(self._job).token != self._token:
            raise RelayError(f"wrong token for job {self._job!r}", "auth")


class MemoryJobControl:
    """A job created in an in-process store."""

    def __init__(self, url: str) -> None:
        self._store = store(url)
        self._id = ""
        self._job: _Job | None = None

    def create(self, job: str, token: str, size: int, fill_timeout: float, events: JobEvents) -> None:
        with self._store.cond:
            if job in self._store.jobs:
                raise RelayError(f"job {job!r} already exists", "job_exists")
            self._id, self._job = job, _Job(token, size, events)
            self._store.jobs[job] = self._job
        self._job.timer = threading.Timer(fill_timeout, self._fill_expired, args=(fill_timeout,))
        self._job.timer.daemon = True
        self._job.timer.start()

    def abort(self, code: int, reason: str) -> None:
        if self._job is not None:
            abort(self._store, self._job, {"code": code, "reason": reason, "rank": None})

    def end(self) -> None:
        job = self._job
        if job is None:
            return
        with self._store.cond:
            self._store.jobs.pop(self._id, None)
            self._store.names.drop_job(self._id)
            for box in job.outboxes.values():
                box.put(None)
        if job.timer is not None:
            job.timer.cancel()
        self._job = None

    def _fill_expired(self, fill_timeout: float) -> None:
        job = self._job
        if job is None:
            return
        with self._store.cond:
            if job.state != "filling":
                return
            missing = [r for r in range(job.size) if r not in job.members]
            message = (
                f"the world of job {self._id!r} did not fill within {fill_timeout:g} s: {len(job.members)} of "
                f"{job.size} ranks joined; missing ranks: {describe_ranks(missing)}"
            )
            failure = RelayError(message, "fill_timeout", {"missing": missing})
            self._store.notify_all(job, failure, Kind.ERROR, {"code": "fill_timeout", "message": message})
        job.events.failed(failure)
