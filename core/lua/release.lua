-- release.lua: give back permits. The newest log members that hold them are
-- removed (or shrunk), so a released permit is credited once, now, and never
-- again when its member would have expired (Redisson credits it twice).
-- ARGV[1] permits, ARGV[2..5] optional code-defined rate.
-- Reply: {code, available}

local L = lib()
local n = tonumber(ARGV[1])
local cfg = L.read_config(KEYS[1])
if cfg == nil and ARGV[2] then
  return { 0, L.int(ARGV[2]) } -- nothing was ever acquired
elseif cfg == nil then
  return { 1 }
elseif cfg == false then
  return { 3 }
end

local vkey, pkey = L.state_keys(cfg)
local v = L.load_state(vkey, pkey, cfg[1], L.now_ms() - cfg[2], false)
local removed = 0
while removed < n do
  local batch = redis.call('ZREVRANGE', pkey, 0, math.min(n - removed, 1000) - 1, 'WITHSCORES')
  if #batch == 0 then
    break
  end
  for i = 1, #batch, 2 do
    local m = batch[i]
    local p = permits_of(m)
    redis.call('ZREM', pkey, m)
    if removed + p > n then
      redis.call('ZADD', pkey, batch[i + 1], L.with_permits(m, removed + p - n))
      p = n - removed
    end
    removed = removed + p
    if removed >= n then
      break
    end
  end
end
v = math.min(cfg[1], v + removed)
L.save_state(vkey, pkey, v, cfg)
return { 0, v }
