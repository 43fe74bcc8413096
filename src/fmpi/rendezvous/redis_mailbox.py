"""A rank's Redis side once the world is out: mailboxes of relayed links, events for the launcher, its finish.

Keys (all under the job's hash tag, see ``redis_keys.py``):

    fmpi:{J}:mbox:R     list: relayed-link chunks for rank R, each sealed by its sender (redis_seal.py:
                        the sender's rank is in the envelope); every sender RPUSHes its chunks in
                        stream order, so each pair's order holds, and the receiver checks it
    fmpi:{J}:finished   hash: rank -> exit code once it finalized (senders to it are told UNDELIVERABLE)
    fmpi:{J}:inbox:R    list: notices for rank R (abort, job failure; and ``_stop`` from its own bridge)
    fmpi:{J}:events     list: what the launcher hears (finished, output, link)

Writes go through Lua scripts that first check the job still exists (its
``meta`` key): a rank that outlives the launcher's cleanup must not bring
keys back to life. Every key written gets the job TTL in the same script.
Every value written is sealed with the job's key (``redis_seal.py``); the
reader (the rank's ``redis_line.py``) opens what it pops and refuses what is not ours.
Reads are blocking pops on the rank's inbox and mailbox together (inbox
first, so an abort overtakes queued data); after a pop, what else is queued
is taken in one MULTI (LRANGE + LTRIM: this rank is the list's only reader).
"""

from __future__ import annotations

import json
from typing import Any

from .redis_keys import DEFAULT_TTL
from .redis_keys import keys as _keys
from .redis_seal import CONTROL, DATA, LAUNCHER, Sealer

BATCH_ITEMS = 64  # chunks per script call / per drain (Lua's unpack has a stack limit)
BATCH_BYTES = 4 << 20

# KEYS: meta, finished, mbox of dest. ARGV: dest, ttl, item... -> 1 queued, 0 dest finished, -1 job gone
_PUSH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
redis.call('RPUSH', KEYS[3], unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[2]))
return 1
"""

# KEYS: meta, events, finished. ARGV: event json, ttl, rank that finished ('' = none), its code
_EVENT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[2]))
end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
return 1
"""

QUEUED, FINISHED, JOB_GONE = 1, 0, -1


class RankMailbox:
    """Rank `rank`'s mailbox and event line. `commands`: one thread's client; `blocking`: the popping thread's.

    What it writes, `sealer` seals; what ``next`` returns is still sealed.
    """

    def __init__(self, commands: Any, blocking: Any, job: str, rank: int, sealer: Sealer, ttl: int = DEFAULT_TTL) -> None:
        self.rank = rank
        self._sealer = sealer
        self._cmd = commands
        self._blk = blocking
        self._keys = _keys(job)
        self._ttl = ttl
        self._push = commands.register_script(_PUSH)
        self._event = commands.register_script(_EVENT)
        self.inbox = f"{self._keys['inbox']}{rank}"
        self.mbox = f"{self._keys['mbox']}{rank}"

    # ------------------------------------------------------------ writing
    def push(self, dest: int, chunks: list[Any]) -> int:
        """Queue chunks (bytes-like) for `dest`, sealed, in order: QUEUED, or FINISHED / JOB_GONE (nothing queued)."""
        keys = [self._keys["meta"], self._keys["finished"], f"{self._keys['mbox']}{dest}"]
        items = [self._sealer.seal(DATA, dest, chunk) for chunk in chunks]
        result = QUEUED
        for batch in _batches(items):
            result = int(self._push(keys=keys, args=[dest, self._ttl, *batch]))
            if result != QUEUED:
                return result
        return result

    def event(self, body: dict[str, Any]) -> bool:
        """Tell the launcher something; False when the job is gone."""
        return self._post(body, "", 0)

    def finished(self, code: int, links: Any) -> bool:
        body: dict[str, Any] = {"type": "finished", "code": code}
        if links is not None:
            body["links"] = links
        return self._post(body, str(self.rank), code)

    def _post(self, body: dict[str, Any], finished: str, code: int) -> bool:
        event = self._sealer.seal(CONTROL, LAUNCHER, json.dumps({**body, "rank": self.rank}, separators=(",", ":")).encode())
        keys = [self._keys["meta"], self._keys["events"], self._keys["finished"]]
        return bool(self._event(keys=keys, args=[event, self._ttl, finished, code]))

    def wake(self, ttl: int = 10) -> None:
        """Unblock our own popping thread (it takes this and stops; the emptied list vanishes)."""
        pipe = self._cmd.pipeline(transaction=True)
        pipe.rpush(self.inbox, self._sealer.seal(CONTROL, self.rank, b'{"kind":"_stop"}'))
        pipe.expire(self.inbox, ttl)
        pipe.execute()

    # ------------------------------------------------------------ reading
    def next(self) -> tuple[str, list[bytes]]:
        """Block until something arrives: ("notice", [json]) or ("chunks", [item, ...])."""
        key, value = self._blk.blpop([self.inbox, self.mbox], timeout=0)
        if key.decode() == self.inbox:
            return "notice", [value]
        pipe = self._blk.pipeline(transaction=True)
        pipe.lrange(self.mbox, 0, BATCH_ITEMS - 1)
        pipe.ltrim(self.mbox, BATCH_ITEMS, -1)
        more, _ = pipe.execute()
        return "chunks", [value, *more]

    def close(self) -> None:
        for client in (self._cmd, self._blk):
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a connection that already broke
                pass


def _batches(items: list[bytes]):
    batch: list[bytes] = []
    size = 0
    for item in items:
        if batch and (len(batch) >= BATCH_ITEMS or size + len(item) > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += len(item)
    if batch:
        yield batch
