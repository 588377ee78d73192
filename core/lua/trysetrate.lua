-- trysetrate.lua: store the config only if the limiter has none.
-- ARGV[1..4] rate, interval ms, type, keepAlive ms. Reply: 1 set, 0 not.

local L = lib()
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
L.write_config(L.argv_config(1))
return 1
