-- release.lua: gives back permits. The newest log members that hold them are
-- removed (or shrunk), so a released permit is credited once, now, and never
-- again when its member would have expired (Redisson credits it twice).
-- ARGV[1..4]: the rate given in code, or four empty strings; ARGV[5] permits.
-- Reply: {OK, available}.

local L = lib()
local n = tonumber(ARGV[5])
local cfg, status = L.read_config(0)
if status == L.NOT_INITIALIZED and ARGV[1] ~= '' then
  return { L.OK, tonumber(ARGV[1]) } -- nothing was ever acquired
elseif status ~= L.OK then
  return { status }
end

local vkey, pkey = state_keys(0, cfg[3], #KEYS)
local v = load_state(vkey, pkey, cfg[1], now - cfg[2], false)
if not v then
  return { L.INVALID_CONFIG }
end
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
if removed > 0 then
  L.emptied(0, pkey)
end
L.save_state(vkey, pkey, math.min(cfg[1], v + removed), L.state_ttl(0, cfg))
return { L.OK, math.min(cfg[1], v + removed) }
