-- acquire.lua: one decision. Prepended with lib.lua.
-- ARGV[1] permits, ARGV[2] log member (21 bytes, id chosen by the caller),
-- ARGV[3..6] optional code-defined rate: rate, interval ms, type, keepAlive ms.
-- Reply: {code, allowed, remaining, retry ms, reset ms,
--         rate, interval, type, keepAlive, now ms}

local n, member = tonumber(ARGV[1]), ARGV[2]
local cfg = read_config(KEYS[1])
local now = now_ms()
local force = false
if ARGV[3] then
  local want = argv_config(3)
  if cfg == nil then
    -- First use, or the config expired or was evicted: create it in this
    -- script (no "not initialized" race) and recount any state left behind.
    write_config(want)
    force = true
  elseif not same_config(cfg, want) then
    change_config(cfg, want, true, now)
  end
  cfg = want
elseif cfg == nil then
  return { 1 }
elseif cfg == false then
  return { 3 }
end

local rate, interval = cfg[1], cfg[2]
local function reply(allowed, v, retry, reset)
  return { 0, allowed, v, retry, reset, rate, interval, tonumber(cfg[3]), cfg[4], now }
end
if n > rate then
  return { 2, 0, 0, 0, 0, rate, interval, tonumber(cfg[3]), cfg[4] }
end

local vkey, pkey = state_keys(cfg)
local v, dirty = load_state(vkey, pkey, rate, now - interval, force)

if v < n and redis.call('ZSCORE', pkey, member) then
  -- The same call was already granted (a resend after a lost reply).
  if dirty then
    save_state(vkey, pkey, v, cfg)
  end
  return reply(1, v, 0, interval)
end

-- walk reads the log oldest-first until `need` permits would have come back
-- (the member with score s returns its permits at s + interval). It returns
-- that score, or nil and the permits of the whole log.
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

local retry = 0
if v < n then
  local at, used = walk(n - v)
  local stale = not at
  if at and cfg[3] == '1' then
    -- Another client may have changed a per-client rate; this client's
    -- counter then lags behind it. Check it against the whole log.
    used = sum_live(pkey)
    stale = v + used < rate
  end
  if stale then
    -- The log does not account for the missing permits (the log was lost,
    -- or the rate changed): rebuild the counter from it.
    v = math.max(0, rate - used)
    dirty = true
    if v < n then
      at = walk(n - v)
    end
  end
  if v < n then
    retry = interval
    if at then
      retry = math.max(1, math.min(at + interval - now, interval))
    end
  end
end

if v >= n then
  if redis.call('ZADD', pkey, 'NX', fmt(now), member) == 1 then
    v = v - n
  end
  save_state(vkey, pkey, v, cfg)
  return reply(1, v, 0, interval)
end

if dirty then
  save_state(vkey, pkey, v, cfg)
end
local reset = retry
local last = redis.call('ZRANGE', pkey, -1, -1, 'WITHSCORES')
if last[2] then
  reset = math.max(retry, math.min(tonumber(last[2]) + interval - now, interval))
end
return reply(0, v, retry, reset)
