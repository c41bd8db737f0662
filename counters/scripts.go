package counters

import "github.com/redis/go-redis/v9"

// Scripts run with EVALSHA (falling back to EVAL on NOSCRIPT). Every
// script touches only keys of one counter (one hash tag, one slot), sets
// the expiries itself, and returns integers. Times inside the bucket
// scripts are microseconds: a Lua number is a double, exact up to 2^53,
// and 2^53 µs is 285 years.

// chargeWindow folds the caller's unapplied consumption into the window
// (and, for a sliding window, the previous one), then checks and charges.
//
// KEYS[1] current window, KEYS[2] previous window
// ARGV: instance, cost, ceiling, own emitted, sliding (0/1), own emitted in
// the previous window, (W − elapsed) in ms, W in ms, charge denied (0/1),
// TTL of the current window in ms, TTL of the previous window in ms, the
// other shards' totals of this and of the previous window (hot keys)
//
// Returns {allowed, total, own, prev total, prev own, instances, own from
// memory, own charged, base, prev base}; own excludes the instance's base
// (its part when an operator last reset the counter, "z:<instance>").
var chargeWindow = redis.NewScript(`
local f, sf = 'i:' .. ARGV[1], 's:' .. ARGV[1]
local cost = tonumber(ARGV[2])
local ceiling = tonumber(ARGV[3])
local sliding = ARGV[5] == '1'

-- counts the caller among the counter's instances the first time it adds
local function seen(key)
  if redis.call('HEXISTS', key, f) == 0 and redis.call('HEXISTS', key, sf) == 0 then
    redis.call('HINCRBY', key, 'n', 1)
  end
end

-- fold the caller's memory-path hits the counter has not applied yet;
-- returns the total and the caller's whole part (memory + charged)
local function fold(key, emitted)
  local own = tonumber(redis.call('HGET', key, f) or '0')
  local total = tonumber(redis.call('HGET', key, 't') or '0')
  if emitted > own then
    seen(key)
    total = total + (emitted - own)
    redis.call('HSET', key, 't', total, f, emitted)
    own = emitted
  end
  local base = tonumber(redis.call('HGET', key, 'z:' .. ARGV[1]) or '0')
  return total, own + tonumber(redis.call('HGET', key, sf) or '0') - base, base
end

local total, own, base = fold(KEYS[1], tonumber(ARGV[4]))
local shards, prevShards = tonumber(ARGV[12]), tonumber(ARGV[13])
local prevTotal, prevOwn, prevBase = 0, 0, 0
local allowed
if sliding then
  prevTotal, prevOwn, prevBase = fold(KEYS[2], tonumber(ARGV[6]))
  local room = ceiling - total - shards - cost
  if room < 0 then
    allowed = false
  else
    local lhs = (prevTotal + prevShards) * tonumber(ARGV[7])
    local rhs = room * tonumber(ARGV[8])
    if lhs < 9007199254740992 and rhs < 9007199254740992 then
      allowed = lhs <= rhs
    else
      allowed = (prevTotal + prevShards) * (tonumber(ARGV[7]) / tonumber(ARGV[8])) <= room
    end
  end
else
  allowed = total + shards + cost <= ceiling
end
if allowed or ARGV[9] == '1' then
  seen(KEYS[1])
  total = redis.call('HINCRBY', KEYS[1], 't', cost)
  redis.call('HINCRBY', KEYS[1], sf, cost)
  own = own + cost
end
redis.call('PEXPIRE', KEYS[1], ARGV[10])
if sliding then
  redis.call('PEXPIRE', KEYS[2], ARGV[11])
end
local mem = tonumber(redis.call('HGET', KEYS[1], f) or '0')
return {allowed and 1 or 0, total, own, prevTotal, prevOwn, tonumber(redis.call('HGET', KEYS[1], 'n') or '0'), mem, own + base - mem, base, prevBase}
`)

// chargeBucket folds the caller's unapplied hits into the bucket's TAT,
// then checks and charges.
//
// KEYS[1] bucket
// ARGV: instance, cost, burst, rate tokens, rate period in µs, own
// cumulative hits, the caller's TAT in µs, now in µs, slack in ms
//
// Returns {allowed, tat µs, cumulative, own, instances, own from memory,
// own charged, base, resets}.
var chargeBucket = redis.NewScript(`
local K = KEYS[1]
local f, sf = 'i:' .. ARGV[1], 's:' .. ARGV[1]
local cost = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tokens = tonumber(ARGV[4])
local period = tonumber(ARGV[5])
local ownCum = tonumber(ARGV[6])
local localTAT = tonumber(ARGV[7])
local now = tonumber(ARGV[8])

local function span(n)
  if n <= 0 then return 0 end
  return math.ceil(n * period / tokens)
end

local tat = tonumber(redis.call('HGET', K, 'tat') or '0')
local cum = tonumber(redis.call('HGET', K, 'c') or '0')
local own = tonumber(redis.call('HGET', K, f) or '0')
local charged = tonumber(redis.call('HGET', K, sf) or '0')
local fresh = redis.call('HEXISTS', K, f) == 0 and redis.call('HEXISTS', K, sf) == 0
local unapplied = math.max(0, ownCum - own)
local base = math.max(tat + span(unapplied), localTAT, now)
local after = base + span(cost)
local allowed = after - now <= span(burst)
tat = math.max(tat, base)
cum = cum + unapplied
own = math.max(own, ownCum)
if allowed then
  tat = after
  cum = cum + cost
  charged = charged + cost
end
if fresh and (own > 0 or charged > 0) then redis.call('HINCRBY', K, 'n', 1) end
redis.call('HSET', K, 'tat', string.format('%d', tat), 'c', cum)
if own > 0 then redis.call('HSET', K, f, own) end
if charged > 0 then redis.call('HSET', K, sf, charged) end
redis.call('PEXPIRE', K, math.max(1, math.ceil((tat - now) / 1000)) + tonumber(ARGV[9]))
local base = tonumber(redis.call('HGET', K, 'z:' .. ARGV[1]) or '0')
return {allowed and 1 or 0, string.format('%d', tat), cum, own + charged - base, tonumber(redis.call('HGET', K, 'n') or '0'), own, charged, base, tonumber(redis.call('HGET', K, 'g') or '0')}
`)

// refund takes back a charge: KEYS[1] the window or bucket; ARGV:
// instance, cost, TAT µs to subtract (0 for a window).
var refund = redis.NewScript(`
local K = KEYS[1]
if redis.call('EXISTS', K) == 0 then return 0 end
local sf = 's:' .. ARGV[1]
local cost = tonumber(ARGV[2])
local charged = tonumber(redis.call('HGET', K, sf) or '0')
redis.call('HSET', K, sf, math.max(0, charged - cost))
if tonumber(ARGV[3]) > 0 then
  local tat = tonumber(redis.call('HGET', K, 'tat') or '0')
  redis.call('HSET', K, 'tat', string.format('%d', tat - tonumber(ARGV[3])))
  redis.call('HINCRBY', K, 'c', -cost)
else
  local t = tonumber(redis.call('HGET', K, 't') or '0')
  redis.call('HSET', K, 't', math.max(0, t - cost))
end
return 1
`)

// apply applies deltas of one counter key (one window, or the bucket), at
// most once each: a delta whose sequence is not above the highest applied
// for its (instance, partition) is skipped. For each delta it adds only
// what lies above the instance's part (own_after), so hits a near-limit
// charge already folded in are not added twice.
//
// KEYS[1] the window or bucket, KEYS[2] the sequence hash
// ARGV[1] kind ("w" or "b"), ARGV[2] TTL of the window in ms (windows) or
// slack in ms (buckets), ARGV[3] now µs (buckets), then 7 values per
// delta: instance, partition, sequence, counted, own_after, first µs,
// tat_after µs; buckets add rate tokens and period µs once at ARGV[4..5].
//
// Returns {applied, skipped}.
var apply = redis.NewScript(`
local K, Q = KEYS[1], KEYS[2]
local bucket = ARGV[1] == 'b'
local first = 4
local tokens, period = 1, 1
if bucket then
  tokens, period = tonumber(ARGV[4]), tonumber(ARGV[5])
  first = 6
end
local function span(n)
  if n <= 0 then return 0 end
  return math.ceil(n * period / tokens)
end
local applied, skipped = 0, 0
local tat = tonumber(redis.call('HGET', K, 'tat') or '0')
for i = first, #ARGV, 7 do
  local inst, part, seq = ARGV[i], ARGV[i+1], tonumber(ARGV[i+2])
  local qf = inst .. '|' .. part
  local last = tonumber(redis.call('HGET', Q, qf) or '0')
  if seq <= last then
    skipped = skipped + 1
  else
    redis.call('HSET', Q, qf, string.format('%d', seq))
    applied = applied + 1
    local counted, ownAfter = tonumber(ARGV[i+3]), tonumber(ARGV[i+4])
    local f = 'i:' .. inst
    if redis.call('HEXISTS', K, f) == 0 and redis.call('HEXISTS', K, 's:' .. inst) == 0 then
      redis.call('HINCRBY', K, 'n', 1)
    end
    local own = tonumber(redis.call('HGET', K, f) or '0')
    local add = counted
    if ownAfter > 0 then add = math.max(0, math.min(counted, ownAfter - own)) end
    redis.call('HSET', K, f, math.max(own + add, ownAfter))
    if bucket then
      tat = math.max(math.max(tat, tonumber(ARGV[i+5])) + span(add), tonumber(ARGV[i+6]))
      redis.call('HINCRBY', K, 'c', add)
    elseif add > 0 then
      redis.call('HINCRBY', K, 't', add)
    end
  end
end
if bucket then
  redis.call('HSET', K, 'tat', string.format('%d', tat))
  local now = tonumber(ARGV[3])
  redis.call('PEXPIRE', K, math.max(1, math.ceil((tat - now) / 1000)) + tonumber(ARGV[2]))
else
  redis.call('PEXPIRE', K, ARGV[2])
end
redis.call('PEXPIRE', Q, 86400000)
return {applied, skipped}
`)

// resetCounter forgets a window's count or a bucket's debt on an
// operator's request: the total (and TAT) become zero, each instance's
// part becomes its base ("z:<instance>", excluded from what reads call its
// own), and a bucket's reset count "g" grows so checkers drop their own
// view of it. Per-instance high-water marks stay, so a delta still in
// flight adds only the hits it carries. KEYS[1] the window or bucket;
// ARGV[1] "w" or "b". Returns 1 if the key existed.
var resetCounter = redis.NewScript(`
local K = KEYS[1]
if redis.call('EXISTS', K) == 0 then return 0 end
local h = redis.call('HGETALL', K)
local parts = {}
for i = 1, #h, 2 do
  local name, v = h[i], tonumber(h[i+1])
  local kind, inst = string.sub(name, 1, 2), string.sub(name, 3)
  if kind == 'i:' or kind == 's:' then parts[inst] = (parts[inst] or 0) + v end
end
for inst, v in pairs(parts) do redis.call('HSET', K, 'z:' .. inst, v) end
if ARGV[1] == 'b' then
  redis.call('HSET', K, 'tat', 0, 'c', 0)
  redis.call('HINCRBY', K, 'g', 1)
else
  redis.call('HSET', K, 't', 0)
end
return 1
`)

// resetSync forgets a `mode: sync` counter: KEYS[1] the counter stem (its
// windows are stem:<start µs>), KEYS[2..] keys deleted as they are; ARGV:
// window µs (0: no windows), now µs (0: the server's TIME).
var resetSync = redis.NewScript(`
local W, now = tonumber(ARGV[1]), tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local n = 0
if W > 0 then
  local ws = now - now % W
  n = n + redis.call('DEL', KEYS[1] .. ':' .. string.format('%d', ws), KEYS[1] .. ':' .. string.format('%d', ws - W))
end
for i = 2, #KEYS do n = n + redis.call('DEL', KEYS[i]) end
return n
`)
