-- acquire.lua: one decision. Prepended with lib.lua.
-- ARGV[1] permits, ARGV[2] log member (21 bytes, id chosen by the caller),
-- ARGV[3..6] optional code-defined rate: rate, interval ms, type, keepAlive ms.
--
-- The allowed path of a limiter with a code-defined rate is straight-line:
-- HMGET, TIME, ZRANGEBYSCORE (+ ZREMRANGEBYSCORE when grants expired),
-- INCRBY, PTTL, ZADD; no library. Its keys get their TTL again only when
-- the counter's TTL falls below one interval, which keeps every key alive
-- at least one interval past the last grant (after that an idle limiter is
-- full again, as if new) and at most keepAlive.

local n, member = tonumber(ARGV[1]), ARGV[2]
local c = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'type', 'keepAliveTime')
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local L -- the library, built on the paths that need it
local coded = ARGV[3] ~= nil
local rate, interval, typ, keep
local stale = false -- the config was (re)written: rebuild the counter
if coded then
  rate, interval, typ, keep = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
  if not (c[1] or c[2] or c[3] or c[4]) and n <= rate then
    local vkey, pkey = KEYS[2], KEYS[4]
    if typ == '1' then
      vkey, pkey = KEYS[3], KEYS[5]
    end
    if redis.call('EXISTS', vkey, pkey) == 0 then
      -- A new limiter (the first request of a client, say): store the
      -- config and grant, with nothing to read first.
      redis.call('HSET', KEYS[1], 'rate', ARGV[3], 'interval', ARGV[4], 'type', typ, 'keepAliveTime', ARGV[6])
      redis.call('PEXPIRE', KEYS[1], keep)
      redis.call('ZADD', pkey, now, member)
      redis.call('SET', vkey, rate - n, 'PX', keep)
      redis.call('PEXPIRE', pkey, keep)
      return { 0, 1, rate - n, 0, interval, now }
    end
  end
  if c[1] ~= ARGV[3] or c[2] ~= ARGV[4] or c[3] ~= ARGV[5] or c[4] ~= ARGV[6] then
    -- First use, an expired or evicted config, or a rate changed in code:
    -- create or update it here (no "not initialized" race), keeping the
    -- history of the same rate type.
    L = lib()
    local old = L.parse_config(c)
    if old == nil then
      L.write_config({ rate, interval, typ, keep })
      stale = true
    else
      L.change_config(old, { rate, interval, typ, keep }, true, now)
    end
  end
else
  L = lib()
  local cfg = L.parse_config(c)
  if cfg == nil then
    return { 1 }
  elseif cfg == false then
    return { 3 }
  end
  rate, interval, typ, keep = cfg[1], cfg[2], cfg[3], cfg[4]
end

-- Reply: {code, allowed, remaining, retry ms, reset ms, now ms}, and for a
-- stored rate also {rate, interval ms, type, keepAlive ms}.
local function reply(code, allowed, v, retry, reset)
  if coded then
    return { code, allowed, v, retry, reset, now }
  end
  return { code, allowed, v, retry, reset, now, rate, interval, tonumber(typ), keep }
end
if n > rate then
  return { 2, rate }
end

local vkey, pkey = KEYS[2], KEYS[4]
if typ == '1' then
  vkey, pkey = KEYS[3], KEYS[5]
end
local cutoff = now - interval

-- Grants that left the window give their permits back.
local released = 0
local expired = redis.call('ZRANGEBYSCORE', pkey, '-inf', cutoff)
if #expired > 0 then
  for i = 1, #expired do
    released = released + permits_of(expired[i])
  end
  redis.call('ZREMRANGEBYSCORE', pkey, '-inf', cutoff)
end

-- Take the permits from the counter at once: v is what is left. A counter
-- that goes negative (too few permits), is garbled or missing (the INCRBY
-- created it: no TTL), lags or exceeds the rate takes the slow path below.
local v = redis.pcall('INCRBY', vkey, released - n)
local ttl = -1
if type(v) == 'number' then
  ttl = redis.call('PTTL', vkey)
end
local rewrite = false -- the counter must be written whole (SET)
local taken = false -- the INCRBY above took the permits
if stale or type(v) ~= 'number' or v < 0 or v + n > rate or ttl < 0 then
  L = L or lib()
  if type(v) == 'number' and ttl >= 0 and not stale and v + n <= rate then
    -- A valid counter with too few permits: undo the take.
    v = redis.call('INCRBY', vkey, n)
  elseif type(v) == 'number' and ttl == -1 and v == released - n and redis.call('EXISTS', pkey) == 0 then
    -- A new limiter: the INCRBY created the counter and there is no log.
    v = rate
    rewrite = true
  else
    -- A counter that is missing, garbled, lagging or above the rate:
    -- rebuild it from the log (Redisson resets it to the full rate).
    v = L.recount(pkey, rate, cutoff)
    rewrite = true
  end
else
  -- Taken. From here v is the permits available before this grant.
  v = v + n
  taken = true
end

-- save writes the counter whole, with fresh TTLs on every key, when needed;
-- otherwise the INCRBY above already did.
local function save(refresh)
  if refresh or rewrite then
    L = L or lib()
    L.save_state(vkey, pkey, v, { rate, interval, typ, keep })
  end
end

if v < n then
  L = L or lib()
  if redis.call('ZSCORE', pkey, member) then
    -- The same call was already granted (a resend after a lost reply).
    save(false)
    return reply(0, 1, v, 0, interval)
  end
  -- walk reads the log oldest-first until `need` permits would have come
  -- back (the member with score s returns its permits at s + interval). It
  -- returns that score, or nil and the permits of the whole log.
  local function walk(need)
    local freed, start = 0, 0
    while true do
      local batch = redis.call('ZRANGE', pkey, start, start + math.min(need, 1000) - 1, 'WITHSCORES')
      if #batch == 0 then
        return nil, freed
      end
      for i = 1, #batch, 2 do
        freed = freed + permits_of(batch[i])
        if freed >= need then
          return tonumber(batch[i + 1]), freed
        end
      end
      start = start + #batch / 2
    end
  end
  local at, used = walk(n - v)
  local lagging = not at
  if at and typ == '1' then
    -- Another client may have changed a per-client rate; this client's
    -- counter then lags behind it. Check it against the whole log.
    used = L.sum_live(pkey)
    lagging = v + used < rate
  end
  if lagging then
    -- The log does not account for the missing permits (the log was lost,
    -- or the rate changed): rebuild the counter from it.
    v = math.max(0, rate - used)
    rewrite = true
    if v < n then
      at = walk(n - v)
    end
  end
  if v < n then
    local retry = interval
    if at then
      retry = math.max(1, math.min(at + interval - now, interval))
    end
    local reset = retry
    local last = redis.call('ZRANGE', pkey, -1, -1, 'WITHSCORES')
    if last[2] then
      reset = math.max(retry, math.min(tonumber(last[2]) + interval - now, interval))
    end
    save(false)
    return reply(0, 0, v, retry, reset)
  end
end

if redis.call('ZADD', pkey, 'NX', now, member) == 1 then
  v = v - n
elseif taken then
  -- A resend of a call already granted: give the permits back.
  redis.call('INCRBY', vkey, n)
end
-- A code-defined rate renews its keys' TTLs when the counter's falls below
-- one interval; a stored rate on every grant, as its keepAlive slides.
save(not coded or ttl < interval)
return reply(0, 1, v, 0, interval)
