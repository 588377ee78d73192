-- trysetrate.lua: stores the rate only if the limiter has none.
-- ARGV[1..4]: rate, interval ms, type, keepAlive ms. Reply: {OK, 1 set, 0 not}.

local L = lib()
if redis.call('EXISTS', KEYS[1]) == 1 then
  return { L.OK, 0 }
end
L.write_config(0, L.argv_config(1))
return { L.OK, 1 }
