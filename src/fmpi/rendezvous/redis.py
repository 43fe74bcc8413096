"""Rendezvous through Redis: the same job life cycle as fmpi-relay, with Redis as the only service.

Any Redis >= 6 works (a local server, ElastiCache, a Redis Cluster): every key
of a job carries the job id as a hash tag, ``fmpi:{JOB}:...``, so all of them
live in one cluster slot and one Lua script may touch them together.
Scripts (``redis_scripts.py``) make each step atomic on the server (a slot is
taken once; the last registrant publishes the world), so ranks need no lock
and no polling:

    fmpi:{J}:meta           hash: token (a verifier, see below), size, state (filling|running|over)
    fmpi:{J}:members        hash: rank -> {"incarnation", "sealed": the sealed endpoints and observed address,
                            "any": true if it holds the slot as a spare}
    fmpi:{J}:inbox:R        list: what rank R is told (world, abort, error); R BLPOPs it. The world names
                            no peer: a rank reads the records of those it links to (``RedisRank.lookup``)
    fmpi:{J}:events         list: what the launcher is told (joined, world, finished, output, abort)
    fmpi:{J}:mbox:R         list: relayed link chunks for rank R (see redis_mailbox.py)
    fmpi:{J}:finished       hash: rank -> exit code, once the rank finalized
    fmpi:{J}:names          set: the service names the job's processes published (MPI Publish_name; the
                            names themselves are keys of their own, ``redis_names.py``)

Every value but the scripts' own bookkeeping is sealed (``redis_seal.py``):
a stranger with the Redis URL reads no address or data and cannot forge a
notice; what is refused is logged once. The join check compares the SHA-1
of the proof a rank shows with the verifier the launcher stored: the token
never reaches Redis, and the verifier does not let anyone join.

Every key has a TTL, and the launcher deletes the whole job when it ends, so
nothing is left behind in the user's Redis. The address Redis sees a rank's
connection come from (``CLIENT INFO``) is its observed public endpoint.

Connections (the rank's bound connection, Redis Cluster routing) are made in
``redis_connect.py``; key names are in ``redis_keys.py``. ``RedisRendezvous``
and ``RedisJobControl`` (``redis_backend.py``) put these behind the
rendezvous protocols.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

from ..util.ranges import describe_ranks
from ..wire.errors import Aborted, RelayError
from ..wire.relay_protocol import abort_body, peer_record, peers_answer
from .redis_connect import connect, explain, on_cluster, scan_slot
from .redis_keys import DEFAULT_TTL, job_pattern
from .redis_names import drop_job_names
from .redis_keys import keys as _keys
from .redis_scripts import NOTIFY_ALL, REGISTER
from .redis_seal import ALL, CONTROL, LAUNCHER, MEMBER, JobKey, Opener, Refused, Sealer, refusal_notice
from .urls import safe_url

def _refusal(exc: Exception) -> RelayError:
    code, _, message = str(exc).partition(" ")
    return RelayError(message or code, code)


def _dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _loads(item: bytes) -> Any:
    """JSON from a list anyone with the Redis URL can push to: a stranger's '{[[[[...' a million deep is
    malformed JSON like any other (ValueError), not a RecursionError that ends the reading thread."""
    try:
        return json.loads(item)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def open_event(opener: Opener, item: bytes) -> dict[str, Any]:
    """An item of the launcher's event list, opened; Refused if it is not ours.

    Items are envelopes (the rank that sealed one is its ``rank``), or the
    register script's JSON for 'joined' and 'world', which carries a sealed,
    single-use proof of the same event from the registering rank.
    """
    if item[:1] != b"{":
        sender, plain = opener.open_any(CONTROL, item, (LAUNCHER, ALL))
        event = json.loads(plain)
        if sender >= 0:
            event["rank"] = sender  # what a rank says is about itself
        return event
    try:
        event = _loads(item)
        sender, plain = opener.open_text(CONTROL, str(event.pop("proof")), LAUNCHER)
    except (ValueError, KeyError, TypeError):
        raise Refused("an event without a valid proof") from None
    proven = json.loads(plain)
    if proven.get("type") != event.get("type") or (event.get("type") == "joined" and sender not in (-1, event.get("rank"))):
        raise Refused(f"a {event.get('type')!r} event whose proof is for another event")
    return {**event, **proven}


class RedisJob:
    """Launcher side: create the job in Redis, follow its events, fail it on the fill deadline, delete it at the end."""

    def __init__(
        self,
        url: str,
        job: str,
        token: str,
        size: int,
        fill_timeout: float,
        on_event: Callable[[str, dict[str, Any]], None],
        ttl: int = DEFAULT_TTL,
    ) -> None:
        self.url, self.job, self.size, self.ttl = url, job, size, ttl
        self._keys = _keys(job)
        key = JobKey(token, job)
        self._sealer, self._opener = Sealer(key, LAUNCHER), Opener(key, LAUNCHER)
        self._refused = refusal_notice("fmpirun")
        self._redis = connect(url, job=job)
        self._events_conn = connect(url, job=job)  # BLPOP blocks its connection
        self._on_event = on_event
        self._notify = self._redis.register_script(NOTIFY_ALL)
        created = self._redis.hsetnx(self._keys["meta"], "token", key.join_verifier())
        if not created:
            raise RelayError(f"job {job!r} already exists in this Redis", "job_exists")
        self._redis.hset(self._keys["meta"], mapping={"size": size, "state": "filling"})
        self._redis.expire(self._keys["meta"], ttl)
        self._closed = threading.Event()
        self._timer = threading.Timer(fill_timeout, self._fill_expired, args=(fill_timeout,))
        self._timer.daemon = True
        self._timer.start()
        self._thread = threading.Thread(target=self._follow, name="fmpi-redis-events", daemon=True)
        self._thread.start()

    def abort(self, code: int, reason: str) -> None:
        notice = self._sealer.seal(CONTROL, ALL, _dumps({"kind": "abort", "code": code, "reason": reason, "rank": None}))
        self._notify(keys=self._list(), args=[self._keys["inbox"], notice, "aborted", ""])

    def end(self) -> None:
        """Delete every key of the job (mailboxes included)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._timer.cancel()
        self._refused.flush()
        drop_job_names(self._redis, self.job)  # (names live outside the job's slot: see redis_names.py)
        keys = scan_slot(self._redis, job_pattern(self.job), self._keys["meta"])
        if keys:
            self._redis.delete(*keys)
        self._redis.rpush(self._keys["events"], self._sealer.seal(CONTROL, LAUNCHER, b'{"type":"_end"}'))  # wake the follower
        self._thread.join(timeout=5)
        self._redis.delete(self._keys["events"])
        self._redis.close()
        self._events_conn.close()

    def _list(self) -> list[str]:
        return [self._keys["meta"], self._keys["members"], self._keys["events"]]

    def _fill_expired(self, fill_timeout: float) -> None:
        members = {int(r) for r in self._redis.hkeys(self._keys["members"])}
        missing = [r for r in range(self.size) if r not in members]
        message = (
            f"the world of job {self.job!r} did not fill within {fill_timeout:g} s: {len(members)} of {self.size} "
            f"ranks joined; missing ranks: {describe_ranks(missing)}"
        )
        body = {"kind": "error", "code": "fill_timeout", "message": message, "missing": missing}
        self._notify(keys=self._list(), args=[self._keys["inbox"], self._sealer.seal(CONTROL, ALL, _dumps(body)), "over", "filling"])

    def _follow(self) -> None:
        while not self._closed.is_set():
            try:
                item = self._events_conn.blpop([self._keys["events"]], timeout=0)
            except Exception as exc:  # noqa: BLE001 - Redis went away: the job has failed, say so once
                if not self._closed.is_set():
                    self._on_event("error", {"kind": "error", "code": "lost", "message": f"lost Redis at {safe_url(self.url)}: {explain(exc)}"})
                return
            if item is None:
                continue
            try:
                event = open_event(self._opener, item[1])
            except Refused as exc:
                self._refused.say(f"{exc} (on {self._keys['events']})")
                continue
            kind = event.get("type") or event.get("kind")
            if kind == "_end":
                return
            self._on_event(kind, event)


class RedisRank:
    """Rank side: register, wait for the world, then hear aborts and job failures on the rank's inbox."""

    def __init__(
        self, url: str, job: str, token: str, source: tuple[str, int] | None = None, timeout: float = 10.0
    ) -> None:
        self.url, self.job = url, job
        self.key = JobKey(token, job)
        self._keys = _keys(job)
        self._redis = connect(url, timeout, source=source, job=job)
        self._inbox_conn = connect(url, job=job)
        self._register = self._redis.register_script(REGISTER)
        self._notify = self._redis.register_script(NOTIFY_ALL)
        self.rank = -1
        self.size = 0
        self.sealer = Sealer(self.key, -1)  # replaced once the rank is known (register)
        self.opener = Opener(self.key, -1)
        self.refused = refusal_notice("rank ?")
        self.observed: tuple[str, int] | None = None  # where Redis saw the registration come from
        self._stop = threading.Event()

    def observed_address(self) -> tuple[str, int]:
        """Where Redis sees this rank's connection come from (its public endpoint behind a NAT)."""
        host, _, port = self._redis.client_info()["addr"].rpartition(":")
        return host, int(port)

    def register(self, rank: int, incarnation: str, endpoints: list[tuple[str, int]], ttl: int = DEFAULT_TTL) -> tuple[int, int]:
        import redis

        self.observed = self.observed_address()
        sealer = Sealer(self.key, rank)
        # A rank may end in another slot than the one it asks for (a spare took its own): the script then keeps the
        # record and 'joined' proof sealed as "any rank" (ALL), which open in any slot, and marks the slot a spare's.
        anywhere = sealer if rank == ALL else Sealer(self.key, ALL)
        place = _dumps({"endpoints": [list(e) for e in endpoints], "observed": list(self.observed)})
        joined_body = _dumps({"type": "joined", "incarnation": incarnation})
        record = json.dumps({"incarnation": incarnation, "sealed": sealer.seal_text(MEMBER, ALL, place)}, separators=(",", ":"))
        spare = json.dumps({"incarnation": incarnation, "sealed": anywhere.seal_text(MEMBER, ALL, place), "any": True},
                           separators=(",", ":"))
        joined = sealer.seal_text(CONTROL, LAUNCHER, joined_body)
        joined_anywhere = joined if anywhere is sealer else anywhere.seal_text(CONTROL, LAUNCHER, joined_body)
        world = sealer.seal_text(CONTROL, LAUNCHER, b'{"type":"world"}')  # (after 'joined': the launcher opens them in order)
        world_notice = sealer.seal(CONTROL, ALL, b'{"kind":"world"}')
        args = [self._keys["inbox"], self.key.join_proof(), rank, record, ttl, joined, world, spare, joined_anywhere,
                world_notice]
        try:
            self.rank = int(self._register(keys=self._list(), args=args))
        except redis.exceptions.AskError as exc:  # (MovedError is one)
            raise RelayError(explain(exc), "moved") from None
        except redis.ResponseError as exc:
            raise _refusal(exc) from None
        self.sealer = sealer if rank == self.rank else Sealer(self.key, self.rank)
        self.opener = Opener(self.key, self.rank)
        self.refused = refusal_notice(f"rank {self.rank}")
        self.size = int(self._redis.hget(self._keys["meta"], "size"))
        return self.rank, self.size

    def wait_world(self, deadline: float) -> int:
        """The job's size, once the last rank registered; forged worlds and notices are refused (logged), not taken."""
        while True:
            remaining = max(0.1, deadline - time.monotonic()) + 5.0  # the launcher enforces the deadline
            item = self._inbox_conn.blpop([self._inbox()], timeout=remaining)
            if item is None:
                raise RelayError(f"no world from Redis at {safe_url(self.url)} in time (is the launcher alive?)", "timeout")
            try:
                notice = self.open_notice(item[1])
                if notice.get("kind") == "world":
                    return self.size
                self._raise_notice(notice)
            except Refused as exc:
                self.refused.say(f"{exc} (on {self._inbox()})")
            except (ValueError, KeyError, TypeError) as exc:  # not JSON
                self.refused.say(f"a malformed notice: {exc} (on {self._inbox()})")

    def lookup(self, ranks: list[int]) -> dict[str, Any]:
        """The PEERS body answering a LOOKUP of `ranks`: their records, one HMGET of the members hash, opened."""
        wanted = list(dict.fromkeys(ranks))
        inside = [r for r in wanted if 0 <= r < self.size]
        missing = {r: f"rank {r} is outside a job of {self.size} ranks" for r in wanted if r not in inside}
        found = []
        for r, item in zip(inside, self._redis.hmget(self._keys["members"], inside) if inside else []):
            try:
                sender, plain = self.opener.open_text(MEMBER, _loads(item)["sealed"], ALL, fresh=False)
                if sender not in (-1, r):
                    raise Refused(f"rank {sender}'s record in the slot of rank {r}")
                place = json.loads(plain)
                found.append(peer_record(r, [tuple(e) for e in place["endpoints"]], tuple(place["observed"]), None))
            except (Refused, ValueError, KeyError, TypeError) as exc:  # (None: the job's keys are gone)
                missing[r] = f"no valid record of rank {r} in Redis ({exc or 'none'})"
        return peers_answer(found, missing)

    def open_notice(self, item: bytes) -> dict[str, Any]:
        """A notice of this rank's inbox (for it, or for every rank), opened; Refused if it is not ours."""
        if item[:1] == b"{":
            raise Refused("an unsealed notice")
        return json.loads(self.opener.open_any(CONTROL, item, (self.rank, ALL))[1])

    def follow(self, on_notice: Callable[[Exception], None]) -> None:
        """After the world: a daemon thread reports aborts and job failures to `on_notice`."""

        def run() -> None:
            while not self._stop.is_set():
                try:
                    item = self._inbox_conn.blpop([self._inbox()], timeout=0)
                except Exception as exc:  # the connection to Redis is gone
                    if not self._stop.is_set():
                        on_notice(RelayError(f"lost Redis at {safe_url(self.url)}: {explain(exc)}", "lost"))
                    return
                try:
                    notice = self.open_notice(item[1])
                except Refused as exc:
                    self.refused.say(f"{exc} (on {self._inbox()})")
                    continue
                if notice.get("kind") == "_stop":
                    return
                try:
                    self._raise_notice(notice)
                except RelayError as exc:
                    on_notice(exc)

        threading.Thread(target=run, name="fmpi-redis-inbox", daemon=True).start()

    def hand_over(self) -> tuple[Any, Any]:
        """(the command client, the blocking client) for the rank's line, which then owns them."""
        return self._redis, self._inbox_conn

    def follow_slot(self) -> None:
        """After the world. The registration connection was bound to the rank's shared port so that Redis saw the
        port peers punch to; on a Redis Cluster a cluster client takes its place now, so the rank's commands follow
        the job's slot if it moves (resharding, failover)."""
        if on_cluster(self.url, self.job):
            bound, self._redis = self._redis, connect(self.url, job=self.job)
            bound.close()
            self._notify = self._redis.register_script(NOTIFY_ALL)

    def abort(self, code: int, reason: str, cause: dict[str, Any] | None = None) -> None:
        notice = self.sealer.seal(CONTROL, ALL, _dumps({"kind": "abort", **abort_body(code, reason, cause), "rank": self.rank}))
        self._notify(keys=self._list(), args=[self._keys["inbox"], notice, "aborted", ""])

    def event(self, body: dict[str, Any]) -> None:
        """Tell the launcher something (finished, output)."""
        self._push(self._keys["events"], self.sealer.seal(CONTROL, LAUNCHER, _dumps(body)), DEFAULT_TTL)

    def close(self) -> None:
        self._stop.set()
        self.refused.flush()
        try:
            # Wakes our own inbox reader. The key may outlive the job (if the
            # launcher already deleted it), so it gets a short TTL of its own.
            self._push(self._inbox(), self.sealer.seal(CONTROL, self.rank, b'{"kind":"_stop"}'), 60)
        except Exception:
            pass
        self._redis.close()

    def _push(self, key: str, value: bytes, ttl: int) -> None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.rpush(key, value)
        pipe.expire(key, ttl)
        pipe.execute()

    def _inbox(self) -> str:
        return f"{self._keys['inbox']}{self.rank}"

    def _list(self) -> list[str]:
        return [self._keys["meta"], self._keys["members"], self._keys["events"]]

    @staticmethod
    def _raise_notice(notice: dict[str, Any]) -> None:
        kind = notice.get("kind")
        if kind == "abort":
            raise Aborted.from_body(notice)
        if kind == "error":
            raise RelayError(str(notice["message"]), str(notice["code"]), notice)
