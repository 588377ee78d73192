-- available.lua: the permits available now. Writes nothing.
-- ARGV[1..4]: the rate given in code, used when none is stored, or four
-- empty strings. Reply: {OK, available}.

local L = lib()
local cfg, status = L.read_config(0)
if status == L.NOT_INITIALIZED and ARGV[1] ~= '' then
  return { L.OK, tonumber(ARGV[1]) } -- nothing was ever acquired
elseif status ~= L.OK then
  return { status }
end

local rate, cutoff = cfg[1], now - cfg[2]
local vkey, pkey = state_keys(0, cfg[3], #KEYS)
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
return { L.OK, math.max(0, v) }
