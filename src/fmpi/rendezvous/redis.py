"""Rendezvous through Redis: the same job life cycle as fmpi-relay, with Redis as the only service.

Any Redis >= 6 works (a local server, ElastiCache, a Redis Cluster): every key
of a job carries the job id as a hash tag, ``fmpi:{JOB}:...``, so all of them
live in one cluster slot and the Lua scripts below may touch them together.
Scripts make each step atomic on the server (a slot is taken once; the last
registrant publishes the world), so ranks need no lock and no polling:

    fmpi:{J}:meta           hash: token (sha256), size, state (filling|running|over)
    fmpi:{J}:members        hash: rank -> {"incarnation", "endpoints", "observed"}
    fmpi:{J}:inbox:R        list: what rank R is told (world, abort, error); R BLPOPs it
    fmpi:{J}:events         list: what the launcher is told (joined, world, finished, output, abort)
    fmpi:{J}:mbox:R         list: relayed link chunks for rank R (see redis_mailbox.py)
    fmpi:{J}:finished       hash: rank -> exit code, once the rank finalized

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
from ..wire.relay_protocol import abort_body
from .redis_connect import connect, explain
from .redis_keys import DEFAULT_TTL, job_pattern, token_hash
from .redis_keys import keys as _keys
from .relay_connection import PeerInfo
from .urls import safe_url

# KEYS: meta, members, events. ARGV: inbox prefix, token hash, rank (-1 = any), record json, ttl
_REGISTER = """
local meta, members, events = KEYS[1], KEYS[2], KEYS[3]
local prefix, token, rank, record, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
if redis.call('EXISTS', meta) == 0 then return redis.error_reply('unknown_job no such job (it ended, or was never created)') end
if redis.call('HGET', meta, 'token') ~= token then return redis.error_reply('auth wrong token for this job') end
if redis.call('HGET', meta, 'state') ~= 'filling' then return redis.error_reply('closed the job no longer takes ranks') end
local size = tonumber(redis.call('HGET', meta, 'size'))
if rank == -1 then
  for r = 0, size - 1 do
    if redis.call('HEXISTS', members, r) == 0 then rank = r break end
  end
  if rank == -1 then return redis.error_reply('duplicate the job is full') end
end
if rank < 0 or rank >= size then return redis.error_reply('bad_rank rank ' .. rank .. ' is outside a job of ' .. size .. ' ranks') end
local taken = redis.call('HGET', members, rank)
if taken then
  return redis.error_reply('duplicate rank ' .. rank .. ' is already registered (incarnation ' .. cjson.decode(taken)['incarnation'] .. '); this duplicate is refused')
end
redis.call('HSET', members, rank, record)
redis.call('EXPIRE', members, ttl)
local joined = redis.call('HLEN', members)
redis.call('RPUSH', events, cjson.encode({type='joined', rank=rank, joined=joined, size=size}))
redis.call('EXPIRE', events, ttl)
if joined == size then
  redis.call('HSET', meta, 'state', 'running')
  local peers = {}
  for r = 0, size - 1 do
    peers[#peers + 1] = '{"rank":' .. r .. ',"member":' .. redis.call('HGET', members, r) .. '}'
  end
  local world = '{"kind":"world","size":' .. size .. ',"peers":[' .. table.concat(peers, ',') .. ']}'
  for r = 0, size - 1 do
    redis.call('RPUSH', prefix .. r, world)
    redis.call('EXPIRE', prefix .. r, ttl)
  end
  redis.call('RPUSH', events, cjson.encode({type='world'}))
end
return rank
"""

# KEYS: meta, members, events. ARGV: inbox prefix, notice json, new state, only-if-state ('' = any)
_NOTIFY_ALL = """
local meta, members, events = KEYS[1], KEYS[2], KEYS[3]
local prefix, notice, state, only_if = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local current = redis.call('HGET', meta, 'state')
if not current or current == 'over' then return 0 end
if only_if ~= '' and current ~= only_if then return 0 end
redis.call('HSET', meta, 'state', state)
local size = tonumber(redis.call('HGET', meta, 'size'))
for r = 0, size - 1 do
  if redis.call('HEXISTS', members, r) == 1 then redis.call('RPUSH', prefix .. r, notice) end
end
redis.call('RPUSH', events, notice)
return 1
"""


def _refusal(exc: Exception) -> RelayError:
    code, _, message = str(exc).partition(" ")
    return RelayError(message or code, code)


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
        self._redis = connect(url, job=job)
        self._events_conn = connect(url, job=job)  # BLPOP blocks its connection
        self._on_event = on_event
        self._notify = self._redis.register_script(_NOTIFY_ALL)
        created = self._redis.hsetnx(self._keys["meta"], "token", token_hash(token))
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
        notice = json.dumps({"kind": "abort", "code": code, "reason": reason, "rank": None})
        self._notify(keys=self._list(), args=[self._keys["inbox"], notice, "aborted", ""])

    def end(self) -> None:
        """Delete every key of the job (mailboxes included)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._timer.cancel()
        pattern = job_pattern(self.job)
        keys = list(self._redis.scan_iter(match=pattern, count=1000))
        if keys:
            self._redis.delete(*keys)
        self._redis.rpush(self._keys["events"], json.dumps({"type": "_end"}))  # wake the follower
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
        notice = json.dumps({"kind": "error", "code": "fill_timeout", "message": message, "missing": missing})
        self._notify(keys=self._list(), args=[self._keys["inbox"], notice, "over", "filling"])

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
            event = json.loads(item[1])
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
        self._token = token
        self._keys = _keys(job)
        self._redis = connect(url, timeout, source=source, job=job)
        self._inbox_conn = connect(url, job=job)
        self._register = self._redis.register_script(_REGISTER)
        self._notify = self._redis.register_script(_NOTIFY_ALL)
        self.rank = -1
        self.size = 0
        self.observed: tuple[str, int] | None = None  # where Redis saw the registration come from
        self._stop = threading.Event()

    def observed_address(self) -> tuple[str, int]:
        """Where Redis sees this rank's connection come from (its public endpoint behind a NAT)."""
        host, _, port = self._redis.client_info()["addr"].rpartition(":")
        return host, int(port)

    def register(self, rank: int, incarnation: str, endpoints: list[tuple[str, int]], ttl: int = DEFAULT_TTL) -> tuple[int, int]:
        import redis

        self.observed = self.observed_address()
        record = json.dumps(
            {"incarnation": incarnation, "endpoints": [list(e) for e in endpoints], "observed": list(self.observed)},
            separators=(",", ":"),
        )
        try:
            self.rank = int(self._register(keys=self._list(), args=[self._keys["inbox"], token_hash(self._token), rank, record, ttl]))
        except redis.ResponseError as exc:
            raise _refusal(exc) from None
        self.size = int(self._redis.hget(self._keys["meta"], "size"))
        return self.rank, self.size

    def wait_world(self, deadline: float) -> list[PeerInfo]:
        remaining = max(0.1, deadline - time.monotonic()) + 5.0  # the launcher enforces the deadline
        item = self._inbox_conn.blpop([self._inbox()], timeout=remaining)
        if item is None:
            raise RelayError(f"no world from Redis at {safe_url(self.url)} in time (is the launcher alive?)", "timeout")
        notice = json.loads(item[1])
        self._raise_notice(notice)
        return [
            PeerInfo(p["rank"], [tuple(e) for e in p["member"]["endpoints"]], tuple(p["member"]["observed"]))
            for p in notice["peers"]
        ]

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
                notice = json.loads(item[1])
                if notice.get("kind") == "_stop":
                    return
                try:
                    self._raise_notice(notice)
                except RelayError as exc:
                    on_notice(exc)

        threading.Thread(target=run, name="fmpi-redis-inbox", daemon=True).start()

    def hand_over(self) -> tuple[Any, Any]:
        """After the world: (the command client, the blocking client) for the rank's bridge, which then owns them."""
        return self._redis, self._inbox_conn

    def abort(self, code: int, reason: str, cause: dict[str, Any] | None = None) -> None:
        notice = json.dumps({"kind": "abort", **abort_body(code, reason, cause), "rank": self.rank})
        self._notify(keys=self._list(), args=[self._keys["inbox"], notice, "aborted", ""])

    def event(self, body: dict[str, Any]) -> None:
        """Tell the launcher something (finished, output)."""
        self._push(self._keys["events"], json.dumps({**body, "rank": self.rank}), DEFAULT_TTL)

    def close(self) -> None:
        self._stop.set()
        try:
            # Wakes our own inbox reader. The key may outlive the job (if the
            # launcher already deleted it), so it gets a short TTL of its own.
            self._push(self._inbox(), json.dumps({"kind": "_stop"}), 60)
        except Exception:
            pass
        self._redis.close()

    def _push(self, key: str, value: str, ttl: int) -> None:
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
