-- trysetrate.lua: stores the rate only if the limiter has none.
-- ARGV[1..4]: rate, interval ms, type, keepAlive ms. Reply: {OK, 1 set, 0 not}.

if redis.call('EXISTS', KEYS[1]) == 1 then
  return { OK, 0 }
end
lib().write_config(0, { tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]) })
return { OK, 1 }
