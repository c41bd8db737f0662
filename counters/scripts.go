package counters

import "github.com/redis/go-redis/v9"

// Scripts run with EVALSHA (falling back to EVAL on NOSCRIPT). Every
// script touches only keys of one counter (one hash tag, one slot), sets
// the expiries itself, and returns integers. Times inside the bucket
// scripts are microseconds: a Lua number is a double, exact up to 2^53,
// and 2^53 µs is 285 years.

// chargeWindow folds the caller's unapplied consumption into the window
// (and, for a sliding window, the previous one), then checks and charges.
// The check mirrors limiter.SlidingCounts.Fits, in milliseconds
// (TestChargeScriptMatchesSlidingCounts holds them equal): exact while
// both products stay below 2^53, compared in doubles beyond.
//
// KEYS[1] current window, KEYS[2] previous window
// ARGV: instance, cost, ceiling, own emitted, sliding (0/1), own emitted in
// the previous window, (W − elapsed) in ms, W in ms, charge denied (0/1),
// TTL of the current window in ms, TTL of the previous window in ms, the
// other shards' totals of this and of the previous window (hot keys), the
// first-touch allowance (0: none), mark (0/1: the caller holds all its
// instance's memory hits of the window), then the other live instances
//
// Returns {allowed, total, own, prev total, prev own, instances, own from
// memory, own charged, base, prev base, reserved}; own excludes the
// instance's base (its part when an operator last reset the counter,
// "z:<instance>"); reserved is what the check held back in the current
// window for the others' allowances.
var chargeWindow = redis.NewScript(`
local f, sf, zf = 'i:' .. ARGV[1], 's:' .. ARGV[1], 'z:' .. ARGV[1]
local cost = tonumber(ARGV[2])
local ceiling = tonumber(ARGV[3])
local sliding = ARGV[5] == '1'

-- One read and at most one write per window: every field the charge needs
-- comes in one HMGET, and what changes goes out in one HSET.
-- Returns the window's state with the caller's memory-path hits folded in
-- (what the counter has not applied of them yet): total, the caller's
-- memory hits, its charged hits, its base, instances, whether the caller
-- is new to the window, and whether anything changed.
local function fold(key, emitted)
  local v = redis.call('HMGET', key, 't', 'n', f, sf, zf)
  local w = {total = tonumber(v[1] or '0'), n = tonumber(v[2] or '0'), mem = tonumber(v[3] or '0'),
    charged = tonumber(v[4] or '0'), base = tonumber(v[5] or '0'), fresh = not v[3] and not v[4], dirty = false}
  if emitted > w.mem then
    w.total = w.total + (emitted - w.mem)
    w.mem, w.dirty = emitted, true
  end
  return w
end

-- writes the window's changed fields, counting the caller among its
-- instances the first time it adds
local function store(key, w)
  if not w.dirty then return end
  if w.fresh then
    w.n, w.fresh = w.n + 1, false
    redis.call('HSET', key, 't', w.total, f, w.mem, sf, w.charged, 'n', w.n)
  else
    redis.call('HSET', key, 't', w.total, f, w.mem, sf, w.charged)
  end
end

-- The hits the other live instances may have admitted in this window
-- without a store call: each not marked here ("m:" absent: no charge
-- that folded all its memory hits) may have spent its allowance, of
-- which the window holds its memory hits.
local allowance = tonumber(ARGV[14])
local function reserved(key)
  local r = 0
  if allowance <= 0 then return r end
  for j = 16, #ARGV do
    local v = redis.call('HMGET', key, 'i:' .. ARGV[j], 'm:' .. ARGV[j])
    if not v[2] then r = r + math.max(0, allowance - tonumber(v[1] or '0')) end
  end
  return r
end

local cur = fold(KEYS[1], tonumber(ARGV[4]))
local shards, prevShards = tonumber(ARGV[12]), tonumber(ARGV[13])
local res = reserved(KEYS[1])
local prev = {total = 0, mem = 0, charged = 0, base = 0}
local allowed
if sliding then
  prev = fold(KEYS[2], tonumber(ARGV[6]))
  local room = ceiling - cur.total - shards - res - cost
  if room < 0 then
    allowed = false
  else
    local lhs = (prev.total + prevShards + reserved(KEYS[2])) * tonumber(ARGV[7])
    local rhs = room * tonumber(ARGV[8])
    if lhs < 9007199254740992 and rhs < 9007199254740992 then
      allowed = lhs <= rhs
    else
      allowed = (prev.total + prevShards + reserved(KEYS[2])) * (tonumber(ARGV[7]) / tonumber(ARGV[8])) <= room
    end
  end
else
  allowed = cur.total + shards + res + cost <= ceiling
end
if (allowed or ARGV[9] == '1') and cost > 0 then
  cur.total, cur.charged, cur.dirty = cur.total + cost, cur.charged + cost, true
end
store(KEYS[1], cur)
-- charged here, with all its memory hits folded: this instance spends no
-- allowance in this window any more, and nothing of it is unapplied
if allowance > 0 and ARGV[15] == '1' then redis.call('HSET', KEYS[1], 'm:' .. ARGV[1], 1) end
redis.call('PEXPIRE', KEYS[1], ARGV[10])
if sliding then
  store(KEYS[2], prev)
  redis.call('PEXPIRE', KEYS[2], ARGV[11])
end
return {allowed and 1 or 0, cur.total, cur.mem + cur.charged - cur.base, prev.total, prev.mem + prev.charged - prev.base,
  cur.n, cur.mem, cur.charged, cur.base, prev.base, res}
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
local f, sf, zf = 'i:' .. ARGV[1], 's:' .. ARGV[1], 'z:' .. ARGV[1]
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

-- one read, one write
local v = redis.call('HMGET', K, 'tat', 'c', f, sf, zf, 'n', 'g')
local tat, cum = tonumber(v[1] or '0'), tonumber(v[2] or '0')
local own, charged, base = tonumber(v[3] or '0'), tonumber(v[4] or '0'), tonumber(v[5] or '0')
local n, gen = tonumber(v[6] or '0'), tonumber(v[7] or '0')
local fresh = not v[3] and not v[4]
local unapplied = math.max(0, ownCum - own)
local start = math.max(tat + span(unapplied), localTAT, now)
local after = start + span(cost)
local allowed = after - now <= span(burst)
tat = math.max(tat, start)
cum = cum + unapplied
own = math.max(own, ownCum)
if allowed then
  tat = after
  cum = cum + cost
  charged = charged + cost
end
-- the caller's fields exist once it has added something: that is what
-- counts it among the instances (here and in the apply script)
if own > 0 or charged > 0 then
  if fresh then n = n + 1 end
  redis.call('HSET', K, 'tat', string.format('%d', tat), 'c', cum, f, own, sf, charged, 'n', n)
else
  redis.call('HSET', K, 'tat', string.format('%d', tat), 'c', cum)
end
redis.call('PEXPIRE', K, math.max(1, math.ceil((tat - now) / 1000)) + tonumber(ARGV[9]))
return {allowed and 1 or 0, string.format('%d', tat), cum, own + charged - base, n, own, charged, base, gen}
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
