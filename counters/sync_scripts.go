package counters

import "github.com/redis/go-redis/v9"

// The `mode: sync` scripts run a rule's algorithm inside Redis, on the
// server's clock (TIME; ARGV[1] pins it for conformance tests only, never
// in production), in microseconds. A forced charge (the last ARGV '1': a
// cost counted after the response) is never refused and may take the
// counter past its limit; it is answered allowed, with what remains. Each
// returns {allowed, remaining,
// reset µs, retry µs (-1: never), token}, the token naming what a refund
// takes back. With a request id (KEYS[last]) the answer is stored for a TTL
// and a retry gets it back uncharged.

const syncPrologue = `
local now
if ARGV[1] ~= '0' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local rid = KEYS[#KEYS]
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  local v = redis.call('GET', rid)
  if v then return cjson.decode(v) end
end
local function done(res)
  if ttl > 0 then redis.call('SET', rid, cjson.encode(res), 'PX', ttl) end
  return res
end
`

// syncWindow: fixed window ('f'), Envoy's fixed window charging every call
// ('e'), sliding window counter ('s'). KEYS[1] counter stem, KEYS[2] request
// id. ARGV: now µs or 0, id TTL ms, kind, limit, window µs, cost, force. The
// sliding window mirrors limiter.SlidingCounts in microseconds
// (TestSyncScriptMatchesSlidingCounts holds them equal); its Lua numbers
// are exact while the products stay below 2^53.
var syncWindow = redis.NewScript(syncPrologue + `
local kind, limit, W, cost, force = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'
local ws = now - now % W
if cost > limit and kind ~= 'e' and not force then -- never fits: nothing changes (Envoy's window still counts it)
  return done({0, 0, 0, -1, ''})
end
local ck = KEYS[1] .. ':' .. string.format('%d', ws)
local never = cost > limit and not force
local allowed, remaining, reset, retry = false, 0, 0, 0
if kind ~= 's' then
  -- fixed windows: one INCRBY decides (taken back when an algorithm rule
  -- refuses; Envoy's window keeps every call), and the expiry is set once,
  -- when the INCRBY created the window
  local cur = redis.call('INCRBY', ck, cost)
  if cur == cost then redis.call('PEXPIRE', ck, math.ceil((ws + W - now) / 1000) + 1000) end
  allowed = force or ((not never) and cur <= limit)
  if not allowed and kind ~= 'e' then cur = redis.call('DECRBY', ck, cost) end
  remaining = math.max(0, limit - cur)
  if cur > 0 then reset = ws + W - now end
  if not allowed then
    if never then retry = -1 else retry = ws + W - now end
  end
  return done({allowed and 1 or 0, remaining, reset, retry, string.format('%d', ws)})
end
local cur = tonumber(redis.call('GET', ck) or '0')
local prev = tonumber(redis.call('GET', KEYS[1] .. ':' .. string.format('%d', ws - W)) or '0')
local e = now - ws
allowed = force or ((not never) and cur + cost <= limit and prev * (W - e) <= (limit - cur - cost) * W)
if allowed then
  cur = redis.call('INCRBY', ck, cost)
  redis.call('PEXPIRE', ck, math.ceil((ws + 2 * W - now) / 1000) + 1000)
end
local room = limit * W - prev * (W - e) - math.min(cur, limit) * W
if room > 0 then remaining = math.floor(room / W) end
if cur > 0 then reset = ws + 2 * W - now elseif prev > 0 then reset = ws + W - now end
if not allowed then
  if never then
    retry = -1
  elseif cur + cost <= limit then
    local q = math.floor((limit - cur - cost) * W / prev)
    retry = W - math.min(q, W) - e
  else
    local q = W
    if cur > 0 then q = math.floor((limit - cost) * W / cur) end
    retry = ws + W - now
    if q < W then retry = retry + W - q end
  end
end
return done({allowed and 1 or 0, remaining, reset, retry, string.format('%d', ws)})
`)

// syncBucket: token bucket, GCRA and the leaky-bucket meter, kept as a
// theoretical arrival time. KEYS[1] TAT key, KEYS[2] request id. ARGV: now
// µs or 0, id TTL ms, burst, tokens, period µs, cost, force. A forced
// charge's debt stays within a hundred bursts, and 100 years, of now (as
// limiter.Force's).
var syncBucket = redis.NewScript(syncPrologue + `
local burst, tokens, period, cost, force = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'
if cost > burst and not force then return done({0, 0, 0, -1, ''}) end -- never fits: nothing changes
local T = period / tokens
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
-- ahead is how far the TAT is ahead of now: whole µs, exact. Everything
-- is computed relative to now: at 10^15 µs (today) a double holds a
-- quarter of a µs, and TAT + cost × T − now came out a fraction over a
-- burst that fits exactly.
local ahead = math.max(tat - now, 0)
local tol = burst * T
local allowed, retry = false, 0
if cost > burst and not force then
  retry = -1
else
  local after = ahead + cost * T
  if after <= tol or force then
    allowed = true
    ahead = math.max(ahead, math.min(after, tol * 101, 3153600000000000))
    redis.call('SET', KEYS[1], string.format('%d', now + math.ceil(ahead)), 'PX', math.ceil(ahead / 1000) + 1000)
  else
    retry = math.ceil(after - tol)
  end
end
local remaining = math.floor((tol - ahead) / T + 1e-9)
return done({allowed and 1 or 0, math.max(0, remaining), math.ceil(ahead), retry, string.format('%d', cost)})
`)

// syncLog: the sliding log. KEYS[1] sorted set of hits (score: time µs;
// member: time:seq:cost), KEYS[2] its hash (sum, at, seq), KEYS[3] request
// id. ARGV: now µs or 0, id TTL ms, limit, window µs, cost, force.
var syncLog = redis.NewScript(syncPrologue + `
local Z, M = KEYS[1], KEYS[2]
local limit, W, cost, force = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
if cost > limit and not force then return done({0, 0, 0, -1, ''}) end -- never fits: nothing changes
local at = tonumber(redis.call('HGET', M, 'at') or '0')
if now < at then now = at end
local sum = tonumber(redis.call('HGET', M, 'sum') or '0')
for _, m in ipairs(redis.call('ZRANGEBYSCORE', Z, '-inf', now - W)) do
  sum = sum - tonumber(string.match(m, ':(%d+)$'))
end
redis.call('ZREMRANGEBYSCORE', Z, '-inf', now - W)
local allowed, retry, token = false, 0, ''
if cost > limit and not force then
  retry = -1
elseif sum + cost <= limit or force then
  allowed = true
  if cost > 0 then
    local seq = redis.call('HINCRBY', M, 'seq', 1)
    token = string.format('%d', now) .. ':' .. seq .. ':' .. cost
    redis.call('ZADD', Z, now, token)
    sum = sum + cost
  end
else
  local free = limit - sum
  local hits = redis.call('ZRANGE', Z, 0, -1, 'WITHSCORES')
  for i = 1, #hits, 2 do
    free = free + tonumber(string.match(hits[i], ':(%d+)$'))
    if free >= cost then
      retry = tonumber(hits[i + 1]) + W - now
      break
    end
  end
end
redis.call('HSET', M, 'sum', sum, 'at', string.format('%d', now))
local reset = 0
local newest = redis.call('ZRANGE', Z, -1, -1, 'WITHSCORES')
if #newest == 2 then reset = tonumber(newest[2]) + W - now end
redis.call('PEXPIRE', Z, math.ceil(W / 1000) + 1000)
redis.call('PEXPIRE', M, math.ceil(W / 1000) + 1000)
return done({allowed and 1 or 0, math.max(0, limit - sum), reset, retry, token})
`)

// syncRefund takes back a sync charge. KEYS[1] the counter stem, TAT key
// or sorted set; KEYS[2] the log's hash. ARGV: kind (w, b, l), token, cost,
// T µs per token (buckets).
var syncRefund = redis.NewScript(`
local kind, token, cost = ARGV[1], ARGV[2], tonumber(ARGV[3])
if kind == 'w' then
  local k = KEYS[1] .. ':' .. token
  local v = tonumber(redis.call('GET', k) or '0')
  if v > 0 then redis.call('SET', k, math.max(0, v - cost), 'KEEPTTL') end
elseif kind == 'b' then
  local v = tonumber(redis.call('GET', KEYS[1]) or '0')
  if v > 0 then redis.call('SET', KEYS[1], string.format('%d', math.floor(v - cost * tonumber(ARGV[4]))), 'KEEPTTL') end
elseif token ~= '' then
  if redis.call('ZREM', KEYS[1], token) == 1 then redis.call('HINCRBY', KEYS[2], 'sum', -cost) end
end
return 1
`)
