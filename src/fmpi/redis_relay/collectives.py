"""Server-side collectives on Redis (``collectives/server_side.Provider``): Lua scripts, one round trip.

Every rank sends its script call and a ``BLPOP`` on its own wake list in one
pipeline (one network round trip): the script records the contribution, and
the call that completes a round pushes what each rank needs onto each rank's
wake list, which ends their ``BLPOP``s. No polling anywhere.

* **barrier** and **small allreduce** (N x bytes <= `small_max`): the script
  keeps contributions in a hash keyed by rank (``HSETNX``: a retried rank's
  second contribution is ignored); the last one pushes all N contributions,
  in rank order, to every rank, and each rank folds them locally in rank
  order with numpy. A barrier is the same script with empty contributions.
* **large allreduce**: a scatter-reduce over per-rank segments. The vector is
  cut into N segments; rank j owns segment j. Step 1: one script call stores
  every segment of the caller's vector under its owner; when segment j has
  all N contributions, they go to rank j's wake list. Rank j folds them in
  rank order. Step 2: rank j publishes its folded segment; when all N are
  in, the whole result goes to every rank. Per rank: ~3x the vector through
  Redis and two round trips, against N x the vector for every rank fetching
  all contributions; the arithmetic runs on the ranks in parallel, not in
  Redis' single thread.
* **pieces**: Redis refuses a command argument longer than its
  ``proto-max-bulk-len`` (512 MB by default, 1 MB at least) by closing the
  connection, which would look like a lost server. So a vector larger than
  that limit (read once per connection, ``bulk_limit``) is reduced in pieces
  of at most the limit, one after the other, each a scatter-reduce of its own
  under the communicator key ``<comm>#p<i>``; then no argument, stored value
  or reply exceeds the limit, and with the default limit every vector up to
  512 MB is one piece, as before.

* **sealed**: every contribution is an envelope of the job's key bound to the
  communicator, round and step (``rendezvous/redis_seal.py``); the ranks cut the
  scripts' concatenations at the known sealed lengths and check who sealed each
  part, so a forged or stale one fails the collective ("forged"), never its result.

Why not fold in Lua: Lua numbers are doubles (int64 would be inexact), and a
script blocks the whole server while it runs. Redis does the coordination —
atomic, keyed by rank, one round trip — and the ranks the arithmetic.

Keys (all under the job's hash tag, all with the job's TTL, deleted with the
job by fmpirun; per-round keys are deleted as soon as the round completes):

    fmpi:{J}:coll:<comm>:<round>             hash: rank -> contribution; 'n' distinct; 'w<rank>' calls
    fmpi:{J}:coll:<comm>:<round>:s<j>        hash: segment j's contributions (large allreduce, step 1)
    fmpi:{J}:coll:<comm>:<round>:res         hash: folded segments (large allreduce, step 2)
    fmpi:{J}:coll:<comm>:<round>:w<tag><r>   list: rank r's wake-up for one step (emptied by its BLPOP)
    fmpi:{J}:coll:<comm>:done                hash: round -> result of the last KEEP completed rounds (a retry
                                             arriving after its round completed gets it);
                                             'floor': every older round (a late retry fails 'expired')
    fmpi:{J}:coll:<comm>:order               list: completed rounds, oldest first
    fmpi:{J}:coll:<comm>#p<i>:...            the same keys for piece i >= 1 of a vector cut into pieces
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np

from ..rendezvous.redis_connect import DEFAULT_BULK_MAX, bulk_limit, explain, is_cluster, redirected, refresh
from ..rendezvous.redis_keys import DEFAULT_TTL
from ..rendezvous.redis_seal import ALL, COLL, OVERHEAD, JobKey, Opener, Refused, Sealer, refusal_notice
from ..rendezvous.relay_connection import RelayError
from ..rendezvous.urls import safe_url
from ..util.ranges import split_even
from ..wire.reduce_ops import ufunc as ufunc_of

KEEP = 8  # completed rounds per communicator whose result a late retry still gets
SMALL_MAX = 64 << 10  # N x vector bytes up to which every rank gets all contributions
WAIT = 30  # seconds per BLPOP; it is repeated while the job lives
SLOT_MOVE = 30.0  # seconds a call waits for a Redis Cluster to finish moving the job's slot

# Shared by the scripts: record a completed round (`result` for late retries), forget old ones;
# wake ranks; refuse a call for a gone job or an expired round; gather one value per rank.
_FUNCTIONS = """
local function done(base, round, result, ttl)
  redis.call('HSET', base .. 'done', round, result)
  redis.call('RPUSH', base .. 'order', round)
  redis.call('EXPIRE', base .. 'done', ttl)
  redis.call('EXPIRE', base .. 'order', ttl)
  while redis.call('LLEN', base .. 'order') > tonumber(ARGV[6]) do
    local old = redis.call('LPOP', base .. 'order')
    redis.call('HDEL', base .. 'done', old)
    local floor = tonumber(redis.call('HGET', base .. 'done', 'floor') or '-1')
    if tonumber(old) > floor then redis.call('HSET', base .. 'done', 'floor', old) end
  end
end
local function wake(key, value, times, ttl)
  for _ = 1, times do redis.call('RPUSH', key, value) end
  redis.call('EXPIRE', key, ttl)
end
-- nil, or why the call is refused; KEYS[2] (the caller's wake list) then gets an empty item, so its BLPOP ends
local function check(base, round, ttl)
  if redis.call('EXISTS', KEYS[1]) == 0 then return 'job_over' end  -- write nothing for a job that is gone
  local floor = tonumber(redis.call('HGET', base .. 'done', 'floor') or '-1')
  if tonumber(round) <= floor and redis.call('HEXISTS', base .. 'done', round) == 0 then
    wake(KEYS[2], '', 1, ttl)
    return 'expired'
  end
  return nil
end
-- `rank`'s `value` into hash `key` (a retried rank's second value is ignored; every call is counted).
-- Once all `size` ranks are in: push their values, in rank order, to each rank's wake list
-- `wprefix .. r` (once per call it made) and return them; nil before.
local function gather(key, rank, value, size, wprefix, ttl)
  if redis.call('HSETNX', key, rank, value) == 1 then redis.call('HINCRBY', key, 'n', 1) end
  redis.call('HINCRBY', key, 'w' .. rank, 1)
  redis.call('EXPIRE', key, ttl)
  if tonumber(redis.call('HGET', key, 'n')) < size then return nil end
  local fields, waits = {}, {}
  for r = 0, size - 1 do fields[r + 1] = tostring(r); waits[r + 1] = 'w' .. r end
  local all = table.concat(redis.call('HMGET', key, unpack(fields)))
  local times = redis.call('HMGET', key, unpack(waits))
  for r = 0, size - 1 do
    local n = tonumber(times[r + 1] or '0')
    if n > 0 then wake(wprefix .. r, all, n, ttl) end
  end
  return all
end
"""

# How every script starts: its arguments, the refusal check, and the round's result if it completed.
_BEGIN = _FUNCTIONS + """
local base, round, rank, size, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local bad = check(base, round, ttl)
if bad then return redis.error_reply(bad) end
local rkey = base .. round
local result = redis.call('HGET', base .. 'done', round)
"""

# Barrier / small allreduce. KEYS[1] meta, KEYS[2] the caller's wake list. ARGV: base ('fmpi:{J}:coll:<comm>:'), round, rank, size, ttl, keep, payload.
# Returns 1 when the caller's wake list holds (or will hold) the answer.
_GATHER = _BEGIN + """
local wkey = rkey .. ':wg'
if result then wake(wkey .. rank, result, 1, ttl) return 1 end
result = gather(rkey, rank, ARGV[7], size, wkey, ttl)
if not result then return 1 end
redis.call('DEL', rkey)
done(base, round, result, ttl)
return 1
"""

# Large allreduce, step 1. ARGV as _GATHER, then ARGV[7..6+size]: the caller's segment j for owner j.
# Returns 1 (the wake list gets segment `rank`'s contributions) or 2 (the round is over: it gets the result).
_SCATTER = _BEGIN + """
if result then wake(KEYS[2], result, 1, ttl) return 2 end  -- a retry after the round completed: the result
redis.call('HINCRBY', rkey .. ':calls', rank, 1)
redis.call('EXPIRE', rkey .. ':calls', ttl)
local fields = {}
for r = 0, size - 1 do fields[r + 1] = tostring(r) end
for j = 0, size - 1 do
  local skey = rkey .. ':s' .. j
  if redis.call('HSETNX', skey, rank, ARGV[7 + j]) == 1 then redis.call('HINCRBY', skey, 'n', 1) end
  redis.call('EXPIRE', skey, ttl)
  if tonumber(redis.call('HGET', skey, 'n')) >= size and redis.call('HGET', skey, 'sent') == false then
    local parts = table.concat(redis.call('HMGET', skey, unpack(fields)))
    local owner = tonumber(redis.call('HGET', rkey .. ':calls', tostring(j)) or '0')
    -- the owner may not have called yet (its own call completes its segment): it takes it from 'parts'
    redis.call('HDEL', skey, unpack(fields))
    redis.call('HSET', skey, 'sent', '1')
    redis.call('HSET', skey, 'parts', parts)
    if owner > 0 then wake(rkey .. ':ws' .. j, parts, owner, ttl) end
  elseif tostring(j) == rank and redis.call('HGET', skey, 'sent') then
    wake(rkey .. ':ws' .. j, redis.call('HGET', skey, 'parts'), 1, ttl)
  end
end
return 1
"""

# Large allreduce, step 2. ARGV as _GATHER with payload = the caller's folded segment.
_PUBLISH = _BEGIN + """
if result then wake(KEYS[2], result, 1, ttl) return 2 end  -- a retry after the round completed: the result
local qkey = rkey .. ':res'
result = gather(qkey, rank, ARGV[7], size, rkey .. ':wr', ttl)
if not result then return 1 end
for r = 0, size - 1 do redis.call('DEL', rkey .. ':s' .. r) end
redis.call('DEL', qkey, rkey .. ':calls')
done(base, round, result, ttl)
return 1
"""


class RedisCollectives:
    """Barrier and allreduce of one job's communicators through Redis scripts (see the module docstring).

    Thread-safe (redis-py's connection pool: a pipeline holds one connection
    while its BLPOP waits, so concurrent collectives of one rank each get
    their own). Connects on first use.
    """

    kind = "redis"
    errors = (RelayError, OSError)  # (what collectives/server_side turns into MPI errors)

    def __init__(
        self, url: str, job: str, token: str, *, ttl: int = DEFAULT_TTL, small_max: int = SMALL_MAX, keep: int = KEEP,
        piece: int | None = None,
    ) -> None:
        """`piece`: most bytes of a vector reduced in one scatter-reduce (None: the server's ``bulk_limit``)."""
        if piece is not None and piece < 1:
            raise ValueError(f"piece must be a positive number of bytes, not {piece}")
        self.url, self.job = url, job
        self._key = JobKey(token, job)
        self._opener = Opener(self._key, ALL)
        self._sealers: dict[int, Sealer] = {}  # rank -> its sealer (one rank per provider, but tests run several)
        self._refused = refusal_notice("a server-side collective")
        self.where = safe_url(url)
        self.ttl, self.small_max, self.keep, self.piece = ttl, small_max, keep, piece
        self.calls: dict[str, int] = {}
        self._meta = f"fmpi:{{{job}}}:meta"
        self._redis: Any = None
        self._scripts: dict[str, Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ plumbing
    def _client(self) -> Any:
        if self._redis is None:
            with self._lock:
                if self._redis is None:
                    from ..rendezvous.redis_connect import connect

                    client = connect(self.url, job=self.job)
                    self._load(client)
                    if self.piece is None:
                        self.piece = bulk_limit(client, self.where)
                    self._redis = client
        return self._redis

    def _load(self, client: Any) -> None:
        self._scripts = {name: client.script_load(text) for name, text in (("gather", _GATHER), ("scatter", _SCATTER), ("publish", _PUBLISH))}

    def _base(self, comm_key: str) -> str:
        return f"fmpi:{{{self.job}}}:coll:{comm_key}:"

    def _call(
        self, script: str, comm_key: str, round: int, rank: int, size: int, payloads: list, wake: str, deadline: float | None
    ) -> tuple[int, bytes]:
        """Run `script` and BLPOP the caller's wake list `wake` (one round trip off a cluster). (script's answer, popped)

        Waits as long as the job lives, or until `deadline` (then RelayError, code "timeout").
        """
        import redis

        def wait() -> float:  # one BLPOP's timeout (never 0: that is forever)
            return WAIT if deadline is None else max(0.01, min(WAIT, deadline - time.monotonic()))

        client = self._client()
        argv = [self._base(comm_key), round, rank, size, self.ttl, self.keep, *payloads]
        try:
            code, popped = self._script_then_pop(client, self._scripts[script], wake, argv, wait)
            while popped is None:  # still waiting for slower ranks, as long as the job lives
                if not client.exists(self._meta):
                    raise RelayError(f"job {self.job} ended while this rank waited in a collective on Redis", "job_over")
                if deadline is not None and time.monotonic() >= deadline:
                    raise RelayError(f"a collective on Redis at {self.where} did not complete in time", "timeout")
                popped = client.blpop([wake], timeout=wait())
        except redis.ResponseError as exc:
            code = str(exc).split()[0] if str(exc) else "error"
            if isinstance(exc, redis.exceptions.AskError):  # the job's cluster slot moved (see explain)
                code = "moved"
            raise RelayError(f"Redis at {self.where} refused a collective call: {explain(exc)}", code) from None
        except redis.RedisError as exc:
            raise RelayError(f"lost Redis at {self.where} during a collective: {exc}", "lost") from None
        return int(code), popped[1]

    def _script_then_pop(self, client: Any, sha: str, wake: str, argv: list, wait: Callable[[], float]) -> list:
        """EVALSHA (the sha loaded at connect: a redis-py Script in a pipeline would cost a SCRIPT EXISTS round trip
        every time) and BLPOP: pipelined, one round trip, on a plain server; on a Redis Cluster (whose client
        refuses EVALSHA in a pipeline) one after the other, through the cluster client, which follows the job's
        slot. The script again after a lost script cache (restart, SCRIPT FLUSH, a slot's new master) or, for up
        to SLOT_MOVE s, while a cluster moves the job's slot (none of those ran it)."""
        import redis

        give_up = time.monotonic() + SLOT_MOVE
        while True:
            try:
                if not is_cluster(client):
                    pipe = client.pipeline(transaction=False)
                    pipe.evalsha(sha, 2, self._meta, wake, *argv)
                    pipe.blpop([wake], timeout=wait())
                    return pipe.execute()
                code = client.evalsha(sha, 2, self._meta, wake, *argv)
                return [code, client.blpop([wake], timeout=wait())]
            except redis.ResponseError as exc:
                if time.monotonic() > give_up:
                    raise
                if isinstance(exc, redis.exceptions.NoScriptError):
                    refresh(client)  # (on a cluster, the slot's new master may be one the client has not met)
                    self._load(client)  # (a script's sha is its text's: the same again)
                elif not redirected(client, exc):
                    raise

    # ------------------------------------------------------------ sealing
    def _seal(self, rank: int, receiver: int, data: bytes, context: bytes) -> bytes:
        sealer = self._sealers.get(rank) or self._sealers.setdefault(rank, Sealer(self._key, rank))
        return sealer.seal(COLL, receiver, data, context)

    def _open(self, blob: bytes, lengths: list[int], receiver: int, context: bytes) -> bytes:
        """The plaintexts of the envelopes laid end to end in `blob` (sealed by rank 0, 1, ... with `lengths`), joined."""
        if len(blob) != sum(lengths) + OVERHEAD * len(lengths):
            raise RelayError(f"a server-side reduction returned {len(blob)} bytes, not {len(lengths)} sealed parts", "expired")
        plain, at = [], 0
        for rank, length in enumerate(lengths):
            envelope = blob[at : at + length + OVERHEAD]
            at += length + OVERHEAD
            try:
                sender, part = self._opener.open(COLL, envelope, receiver, fresh=False, context=context)
                if sender != rank:
                    raise Refused(f"rank {sender}'s contribution in the place of rank {rank}'s")
            except Refused as exc:
                self._refused.say(f"{exc} (job {self.job})")
                raise RelayError(f"a server-side collective on Redis at {self.where} was refused: {exc}", "forged") from None
            plain.append(part)
        return b"".join(plain)

    # ------------------------------------------------------------ provider
    def barrier(self, comm_key: str, generation: int, rank: int, size: int, deadline: float | None = None) -> None:
        wake = f"{self._base(comm_key)}{generation}:wg{rank}"
        context = _context(comm_key, generation, "b")
        _, blob = self._call("gather", comm_key, generation, rank, size, [self._seal(rank, ALL, b"", context)], wake, deadline)
        self._open(blob, [0] * size, ALL, context)
        self.calls["barrier"] = self.calls.get("barrier", 0) + 1

    def allreduce(
        self, comm_key: str, round: int, rank: int, size: int, send: np.ndarray, op: str, out: np.ndarray,
        deadline: float | None = None,
    ) -> None:
        ufunc = ufunc_of(op)
        src = np.ascontiguousarray(send).reshape(-1)
        flat = out.reshape(-1)
        base = f"{self._base(comm_key)}{round}"
        if src.nbytes * size <= self.small_max:
            context = _context(comm_key, round, "g")
            mine = self._seal(rank, ALL, src.view(np.uint8).tobytes(), context)
            _, blob = self._call("gather", comm_key, round, rank, size, [mine], f"{base}:wg{rank}", deadline)
            _fold_into(flat, self._open(blob, [src.nbytes] * size, ALL, context), size, src.dtype, ufunc)
            self.calls["allreduce"] = self.calls.get("allreduce", 0) + 1
            return
        self._client()  # (reads the server's limit into self.piece)
        # elements per piece (the sealed parts add OVERHEAD each: what the scripts store stays within the limit)
        step = max(1, ((self.piece or DEFAULT_BULK_MAX) - size * OVERHEAD) // src.itemsize)
        # equal pieces of at most `step` elements (piece 0 keeps the communicator's own key)
        for i, (lo, hi) in enumerate(split_even(src.size, -(-src.size // step))):
            key = f"{comm_key}#p{i}" if i else comm_key
            # (each piece's result is written before the next piece is read: in place is safe, the pieces are disjoint)
            flat[lo:hi] = self._scatter_reduce(key, round, rank, size, src[lo:hi], ufunc, deadline)
        self.calls["allreduce"] = self.calls.get("allreduce", 0) + 1

    def _scatter_reduce(self, comm_key, round, rank, size, src, ufunc, deadline) -> np.ndarray:
        """The large allreduce of `src` (at most one piece) under `comm_key`: segment j is folded by rank j."""
        base = f"{self._base(comm_key)}{round}"
        bounds = split_even(src.size, size)
        to_owner = _context(comm_key, round, "s")
        segments = [self._seal(rank, j, src[lo:hi].view(np.uint8).tobytes(), to_owner) for j, (lo, hi) in enumerate(bounds)]
        code, parts = self._call("scatter", comm_key, round, rank, size, segments, f"{base}:ws{rank}", deadline)
        if code == 2:  # a retry of a round that completed meanwhile
            whole = parts
        else:
            lo, hi = bounds[rank]
            parts = self._open(parts, [(hi - lo) * src.itemsize] * size, rank, to_owner)
            whole = self._publish(comm_key, round, rank, size, src, bounds, parts, ufunc, base, deadline)
        published = [(hi - lo) * src.itemsize for lo, hi in bounds]
        whole = self._open(whole, published, ALL, _context(comm_key, round, "r"))
        if len(whole) != src.nbytes:
            raise RelayError(f"Redis at {self.where}: round {round} of {comm_key} completed long ago (expired)", "expired")
        return np.frombuffer(whole, dtype=src.dtype)

    def _publish(self, comm_key, round, rank, size, src, bounds, parts, ufunc, base, deadline) -> bytes:
        """Step 2: fold our segment's contributions, publish it, get the whole result."""
        lo, hi = bounds[rank]
        mine = np.empty(hi - lo, dtype=src.dtype)
        _fold_into(mine, parts, size, src.dtype, ufunc)
        sealed = self._seal(rank, ALL, mine.view(np.uint8).tobytes(), _context(comm_key, round, "r"))
        _, whole = self._call("publish", comm_key, round, rank, size, [sealed], f"{base}:wr{rank}", deadline)
        return whole

    def close(self) -> None:
        self._refused.flush()
        client, self._redis = self._redis, None
        if client is not None:
            client.close()


def _context(comm_key: str, round: int, step: str) -> bytes:
    """What a sealed contribution is bound to: a contribution of another round, step or communicator does not open."""
    return f"\0{comm_key}\0{round}\0{step}".encode()


def _fold_into(out: np.ndarray, blob: bytes, size: int, dtype: np.dtype, ufunc: np.ufunc) -> None:
    """`out` = contribution 0 op 1 op ... op size-1, the contributions laid end to end in `blob`."""
    if len(blob) != out.size * dtype.itemsize * size:
        raise RelayError(f"a server-side reduction returned {len(blob)} bytes, not {size} x {out.nbytes}", "expired")
    parts = np.frombuffer(blob, dtype=dtype).reshape(size, out.size)
    out[...] = parts[0]
    for r in range(1, size):
        ufunc(out, parts[r], out=out)
