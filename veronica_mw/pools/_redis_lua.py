"""Lua scripts of the Redis budget backend (each runs atomically inside Redis).

KEYS[1] is the bucket hash (fields ``win spent reserved steps`` and ``r:<id>`` per reservation, whose
value is its amount or ``x`` once reclaimed), KEYS[2] the sorted set of reservation ids scored by the
ms at which they are reclaimed (or, once reclaimed, forgotten), KEYS[3] (absorb only) the token key.
All keys share one ``{hash-tag}`` so the scripts also run on Redis Cluster. The rules are those of
:mod:`veronica_mw.pools._backend`; numbers are integer nano-dollars formatted with ``%d`` because
Lua's default number formatting would turn large integers into lossy ``1e+14``-style strings.
"""

from __future__ import annotations

# ARGV[1..4] of every bucket script: caller's window id, now (ms), key TTL (ms), reservation TTL (ms).
_PRELUDE = """
local key, zkey = KEYS[1], KEYS[2]
local win, now, ttl, rttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function d(n) return string.format('%d', n) end
local function num(v)
  if v == false then return 0 end
  local n = tonumber(v)
  if n == nil or n ~= n or n < 0 or n > 9007199254740991 or n ~= math.floor(n) then return nil end
  return n
end
local raw = redis.call('HMGET', key, 'win', 'spent', 'reserved', 'steps')
local st = {num(raw[1]), num(raw[2]), num(raw[3]), num(raw[4])}
for i = 1, 4 do
  if st[i] == nil then
    return {-1, i}
  end
end
local dirty = false
if win > st[1] then
  -- window reset: one atomic step; open reservations carry over
  st[1], st[2], st[4] = win, 0, 0
  dirty = true
end
local due = redis.call('ZRANGEBYSCORE', zkey, '-inf', now, 'LIMIT', 0, 256)
for _, id in ipairs(due) do
  local f = 'r:' .. id
  local v = redis.call('HGET', key, f)
  if v == false or v == 'x' then
    redis.call('HDEL', key, f, 'q:' .. id)
    redis.call('ZREM', zkey, id)
  else
    -- reclaim a crashed worker's reservation; keep a marker so a late commit still counts once
    st[3] = math.max(0, st[3] - (num(v) or 0))
    redis.call('HSET', key, f, 'x')
    redis.call('ZADD', zkey, now + rttl, id)
    dirty = true
  end
end
local function save()
  redis.call('HSET', key, 'win', d(st[1]), 'spent', d(st[2]), 'reserved', d(st[3]), 'steps', d(st[4]))
  redis.call('PEXPIRE', key, ttl)
  redis.call('PEXPIRE', zkey, ttl)
end
"""

STATE = (
    _PRELUDE
    + """
if dirty then save() end
return {1, st[1], st[2], st[3], st[4]}
"""
)

# ARGV[5] id, ARGV[6] amount, ARGV[7] limit, ARGV[8] step limit (-1: none)
RESERVE = (
    _PRELUDE
    + """
local id, amount, limit, lsteps = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local f = 'r:' .. id
if redis.call('HEXISTS', key, f) == 1 then
  -- a retried call whose first attempt already reserved
  if dirty then save() end
  return {1, st[1], st[2], st[3], st[4]}
end
local ok
if lsteps >= 0 and st[4] >= lsteps then
  ok = false
elseif amount == 0 then
  ok = st[2] < limit
else
  ok = st[2] + st[3] + amount <= limit
end
if ok then
  st[3] = st[3] + amount
  st[4] = st[4] + 1
  redis.call('HSET', key, f, d(amount))
  redis.call('ZADD', zkey, now + rttl, id)
  save()
  return {1, st[1], st[2], st[3], st[4]}
end
if dirty then save() end
return {0, st[1], st[2], st[3], st[4]}
"""
)

# ARGV[5] id, ARGV[6] actual cost. Returns 1 settled, 2 settled after reclaim, 0 unknown id.
SETTLE = (
    _PRELUDE
    + """
local id, actual = ARGV[5], tonumber(ARGV[6])
local f = 'r:' .. id
local v = redis.call('HGET', key, f)
if v == false then
  if dirty then save() end
  return {0}
end
local code = 2
if v ~= 'x' then
  st[3] = math.max(0, st[3] - (num(v) or 0))
  code = 1
end
st[2] = math.min(9007199254740991, st[2] + actual)
redis.call('HDEL', key, f)
redis.call('ZREM', zkey, id)
save()
return {code}
"""
)

# KEYS[3] token key; ARGV[5] target window, ARGV[6] usd, ARGV[7] steps. Returns 1 applied, 0 replay.
ABSORB = (
    _PRELUDE
    + """
if not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ttl) then
  if dirty then save() end
  return {0}
end
if st[1] == tonumber(ARGV[5]) then
  st[2] = math.min(9007199254740991, st[2] + tonumber(ARGV[6]))
  st[4] = st[4] + tonumber(ARGV[7])
end
save()
return {1}
"""
)

# A lease: one reservation of this process whose amount changes (see pools/_lease.py).
# ARGV[5] id, [6] seq, [7] booked (spend to commit), [8] steps to count, [9] in-flight amount,
# [10] keep, [11] ask (-1: none), [12] extra (slice wanted), [13] limit.
# Field q:<id> holds the last applied seq: a retried (reply lost) sync is answered, not re-applied.
# Returns {1, hold, win, spent, reserved, steps}.
LEASE = (
    _PRELUDE
    + """
local id, seq = ARGV[5], tonumber(ARGV[6])
local booked, nsteps, inflight = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local keep, ask, extra, limit = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local f, q = 'r:' .. id, 'q:' .. id
local v = redis.call('HGET', key, f)
local held = 0
if v ~= false and v ~= 'x' then held = num(v) or 0 end
if seq <= (tonumber(redis.call('HGET', key, q) or '0') or 0) then
  if dirty then save() end
  return {1, held, st[1], st[2], st[3], st[4]}
end
st[3] = math.max(0, st[3] - held)
st[2] = math.min(9007199254740991, st[2] + booked)
st[4] = st[4] + nsteps
local hold = keep
if v == false or v == 'x' then
  -- nothing held (first sync, or reclaimed while this process stalled): only the in-flight
  -- calls are owed; the rest of keep only if it still fits
  hold = inflight + math.max(0, math.min(keep - inflight, limit - st[2] - st[3] - inflight))
end
if ask > 0 and st[2] + st[3] + hold + ask <= limit then
  hold = hold + ask
end
if extra > 0 then
  local room = limit - st[2] - st[3] - hold
  if room >= 2 then hold = hold + math.min(extra, math.floor(room / 2)) end
end
if hold > 0 then
  redis.call('HSET', key, f, d(hold), q, d(seq))
  redis.call('ZADD', zkey, now + rttl, id)
else
  redis.call('HDEL', key, f)
  redis.call('HSET', key, q, d(seq))
  redis.call('ZREM', zkey, id)
end
st[3] = st[3] + hold
save()
return {1, hold, st[1], st[2], st[3], st[4]}
"""
)

# Operator reset of the current window (also the repair for corrupted values: it rewrites all four).
RESET = """
local key, zkey = KEYS[1], KEYS[2]
local win, ttl = tonumber(ARGV[1]), tonumber(ARGV[3])
local reserved = 0
local zt = redis.call('TYPE', zkey)['ok']
if redis.call('TYPE', key)['ok'] ~= 'hash' or (zt ~= 'zset' and zt ~= 'none') then
  redis.call('DEL', key, zkey)
else
  local v = tonumber(redis.call('HGET', key, 'reserved'))
  if v ~= nil and v == v and v >= 0 then reserved = v end
end
redis.call('HSET', key, 'win', string.format('%d', win), 'spent', '0',
           'reserved', string.format('%d', reserved), 'steps', '0')
redis.call('PEXPIRE', key, ttl)
return {1}
"""
