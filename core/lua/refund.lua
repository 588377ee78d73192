-- refund.lua: gives back the permits of one grant, found by its log member,
-- if it is still in the window: it is removed from the log, so it is never
-- credited twice, and no other grant moves. A grant that left the window,
-- was refunded before or never existed changes nothing.
-- ARGV[1..4]: the rate given in code, or four empty strings; ARGV[5] the
-- grant's log member. Reply: {OK, 1 refunded, 0 not}.

local L = lib()
local cfg, status = L.read_config(0)
if status == L.NOT_INITIALIZED and ARGV[1] ~= '' then
  return { L.OK, 0 } -- no config, hence no grant
elseif status ~= L.OK then
  return { status }
end

local vkey, pkey = state_keys(0, cfg[3])
local cutoff = now - cfg[2]
local score = tonumber(redis.call('ZSCORE', pkey, ARGV[5]))
if not score or score <= cutoff then
  return { L.OK, 0 }
end
local v = load_state(vkey, pkey, cfg[1], cutoff, false)
redis.call('ZREM', pkey, ARGV[5])
L.save_state(vkey, pkey, math.min(cfg[1], v + permits_of(ARGV[5])), L.state_ttl(0, cfg))
return { L.OK, 1 }
