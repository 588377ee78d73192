-- available.lua: permits available now, without writing anything.
-- ARGV[1..4] optional code-defined rate: used when no config is stored.
-- Reply: {code, available, rate, interval, type, keepAlive}

local L = lib()
local cfg = L.read_config(KEYS[1])
if cfg == nil and ARGV[1] then
  cfg = L.argv_config(1)
  return { 0, cfg[1], cfg[1], cfg[2], tonumber(cfg[3]), cfg[4] }
elseif cfg == nil then
  return { 1 }
elseif cfg == false then
  return { 3 }
end

local rate, cutoff = cfg[1], L.now_ms() - cfg[2]
local vkey, pkey = L.state_keys(cfg)
local live = function()
  local used = 0
  local members = redis.call('ZRANGEBYSCORE', pkey, '(' .. L.fmt(cutoff), '+inf')
  for i = 1, #members do
    used = used + permits_of(members[i])
  end
  return used
end

local v = L.int(redis.call('GET', vkey))
if v then
  local expired = redis.call('ZRANGEBYSCORE', pkey, '-inf', cutoff)
  for i = 1, #expired do
    v = v + permits_of(expired[i])
  end
  if v > rate then
    v = rate - live()
  end
else
  v = rate - live()
end
return { 0, math.max(0, v), rate, cfg[2], tonumber(cfg[3]), cfg[4] }
