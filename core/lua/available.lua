-- available.lua: the permits available now. Writes nothing.
-- ARGV[1..4]: the rate given in code, used when none is stored, or four
-- empty strings; ARGV[5], if given: permits, which a peek asks of. Reply:
-- {OK, available}; for a peek, {OK, available, retry ms, reset ms, rate,
-- interval ms, type}: the time until the permits are available (0: now;
-- -1: more than the rate; below -1, -2 - retry: a bound, as acquire's),
-- until every permit is, and the rate that decides.

local L = lib()
local n = tonumber(ARGV[5])
local cfg, status = L.read_config(0)
-- A rate in code that the stored one is not: the next acquire stores it,
-- keeping the history, so the log decides at that rate.
local changed = false
if ARGV[1] ~= '' and status ~= L.NOT_INITIALIZED then
  local coded = L.argv_config(1)
  changed = status ~= L.OK or cfg[1] ~= coded[1] or cfg[2] ~= coded[2] or cfg[3] ~= coded[3]
  if changed then
    cfg, status = coded, L.OK
  end
end
if status == L.NOT_INITIALIZED and ARGV[1] ~= '' then
  -- Nothing was ever acquired.
  if n then
    return { L.OK, tonumber(ARGV[1]), tonumber(ARGV[1]) < n and -1 or 0, 0,
      tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]) }
  end
  return { L.OK, tonumber(ARGV[1]) }
elseif status ~= L.OK then
  return { status }
end

local rate, cutoff = cfg[1], now - cfg[2]
local vkey, pkey = state_keys(0, cfg[3], #KEYS)
local live = function()
  return sum_permits(redis.call('ZRANGEBYSCORE', pkey, '(' .. L.fmt(cutoff), '+inf'))
end

local v = L.int(redis.call('GET', vkey))
local out = 0 -- the permits of the grants that left the window, still logged
if v and not changed and redis.call('EXISTS', pkey) == 1 then
  out = sum_permits(redis.call('ZRANGEBYSCORE', pkey, '-inf', cutoff))
  v = v + out
  if v > rate then
    v = rate - live()
  end
else
  -- No counter, or no log (so no permit is out): the log decides.
  v = rate - live()
  if n then
    out = sum_permits(redis.call('ZRANGEBYSCORE', pkey, '-inf', cutoff))
  end
end
if not n then
  return { L.OK, math.max(0, v) }
end
local interval = cfg[2]
local retry, reset = 0, 0
local last = L.newest(pkey)
if last then
  reset = math.max(0, math.min(last + interval - now, interval))
end
if n > rate then
  retry = -1
elseif v < n then
  -- The log's oldest grants: those that left the window first, whose
  -- permits v counts already.
  local at, _, exact = L.walk(pkey, n - v + out)
  retry = interval
  if at then
    retry = math.max(1, math.min(at + interval - now, interval))
  end
  reset = math.max(reset, retry)
  if not exact then
    retry = -2 - retry
  end
end
return { L.OK, math.max(0, v), retry, reset, rate, interval, tonumber(cfg[3]) }
