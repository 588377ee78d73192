-- available.lua: the permits available now. Writes nothing.
-- ARGV[1..4]: the rate given in code, used when none is stored, or four
-- empty strings. Reply: {OK, available, rate, interval, type, keepAlive}.

local L = lib()
local cfg = L.read_config(0)
if cfg == nil and ARGV[1] ~= '' then
  cfg = L.argv_config(1)
  return { OK, cfg[1], cfg[1], cfg[2], tonumber(cfg[3]), cfg[4] }
elseif cfg == nil then
  return { NOT_INITIALIZED }
elseif cfg == false then
  return { INVALID_CONFIG }
end

local rate, cutoff = cfg[1], L.now_ms() - cfg[2]
local vkey, pkey = state_keys(0, cfg[3])
local live = function()
  return sum_permits(redis.call('ZRANGEBYSCORE', pkey, '(' .. L.fmt(cutoff), '+inf'))
end

local v = L.int(redis.call('GET', vkey))
if v and redis.call('EXISTS', pkey) == 1 then
  v = v + sum_permits(redis.call('ZRANGEBYSCORE', pkey, '-inf', cutoff))
  if v > rate then
    v = rate - live()
  end
else
  -- No counter, or no log (so no permit is out): the log decides.
  v = rate - live()
end
return { OK, math.max(0, v), rate, cfg[2], tonumber(cfg[3]), cfg[4] }
