"""The Lua scripts of the Redis rendezvous (``redis.py``): each step of a job's life, atomic on the server.

``REGISTER`` takes a slot once and, for the last registrant, publishes the
world, with fmpi-relay's rules: rank -1 takes any free slot (a spare, marked
``"any"`` in its record); a pinned rank whose slot a spare took first takes a
free slot instead, and holds it as a spare does; one invocation (incarnation)
joins once. ``NOTIFY_ALL`` ends the job for every rank and the launcher
(abort, fill timeout). Keys are listed in ``redis.py``. ``UNPUBLISH_NAME`` and
``DROP_NAME`` withdraw a published service name (``redis_names.py``) only if
it still holds the given port, or belongs to the given job.
"""

from __future__ import annotations

# KEYS: meta, members, events. ARGV: inbox prefix, join proof, rank (-1 = any), record json, ttl,
# sealed proofs of the 'joined' and (used if this rank completes the world) 'world' events, then the record and
# 'joined' proof sealed as "any rank" (used if the rank holds a slot not its own: as a spare, or moved by one),
# then the sealed world notice every rank's inbox gets if this rank completes the world (it names no peer: ranks
# read the records of the peers they link to from the members hash, RedisRank.lookup)
REGISTER = """
local meta, members, events = KEYS[1], KEYS[2], KEYS[3]
local prefix, proof, rank, record, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local joined_proof = ARGV[6]
if redis.call('EXISTS', meta) == 0 then return redis.error_reply('unknown_job no such job (it ended, or was never created)') end
if redis.call('HGET', meta, 'token') ~= redis.sha1hex(proof) then return redis.error_reply('auth wrong token for this job') end
if redis.call('HGET', meta, 'state') ~= 'filling' then return redis.error_reply('closed the job no longer takes ranks') end
local size = tonumber(redis.call('HGET', meta, 'size'))
local incarnation = cjson.decode(record)['incarnation']
local function joined_once()
  for r = 0, size - 1 do
    local member = redis.call('HGET', members, r)
    if member and cjson.decode(member)['incarnation'] == incarnation then
      return redis.error_reply('duplicate incarnation ' .. incarnation .. ' already joined this job as rank ' .. r .. '; this duplicate is refused')
    end
  end
end
-- the lowest free slot, looked for only by a rank that needs one (a scan of every slot per join is O(N^2) in all)
local function first_free()
  for r = 0, size - 1 do
    if redis.call('HEXISTS', members, r) == 0 then return r end
  end
  return -1
end
local any = rank == -1
local free = -1
if any then
  local refused = joined_once()
  if refused then return refused end
  free = first_free()
  if free == -1 then return redis.error_reply('duplicate the job is full') end
  rank = free
end
if rank < 0 or rank >= size then return redis.error_reply('bad_rank rank ' .. rank .. ' is outside a job of ' .. size .. ' ranks') end
local taken = redis.call('HGET', members, rank)
if taken and cjson.decode(taken)['any'] then free = first_free() end
if taken and free ~= -1 and cjson.decode(taken)['any'] then
  -- a spare that started first holds this slot: take a free one, and hold it as a spare does
  local refused = joined_once()
  if refused then return refused end
  rank, any, taken = free, true, false
end
if taken then
  return redis.error_reply('duplicate rank ' .. rank .. ' is already registered (incarnation ' .. cjson.decode(taken)['incarnation'] .. '); this duplicate is refused')
end
if any then record, joined_proof = ARGV[8], ARGV[9] end
redis.call('HSET', members, rank, record)
redis.call('EXPIRE', members, ttl)
local joined = redis.call('HLEN', members)
redis.call('RPUSH', events, cjson.encode({type='joined', rank=rank, joined=joined, size=size, proof=joined_proof}))
redis.call('EXPIRE', events, ttl)
if joined == size then
  redis.call('HSET', meta, 'state', 'running')
  for r = 0, size - 1 do
    redis.call('RPUSH', prefix .. r, ARGV[10])
    redis.call('EXPIRE', prefix .. r, ttl)
  end
  redis.call('RPUSH', events, cjson.encode({type='world', proof=ARGV[7]}))
end
return rank
"""

# KEYS: meta, members, events. ARGV: inbox prefix, notice json, new state, only-if-state ('' = any)
NOTIFY_ALL = """
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

# KEYS: the name's key. ARGV: the port it must hold. Returns the job that published it.
UNPUBLISH_NAME = """
local held = redis.call('GET', KEYS[1])
if not held then return redis.error_reply('name_unknown the service is not published') end
local ok, record = pcall(cjson.decode, held)
if not ok or type(record) ~= 'table' or record['port'] ~= ARGV[1] then
  return redis.error_reply('name_port the service is published with another port')
end
redis.call('DEL', KEYS[1])
return tostring(record['job'])
"""

# KEYS: the name's key. ARGV: the job that ended. Deletes the name only if that job published it.
DROP_NAME = """
local held = redis.call('GET', KEYS[1])
if not held then return 0 end
local ok, record = pcall(cjson.decode, held)
if ok and type(record) == 'table' and record['job'] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""
