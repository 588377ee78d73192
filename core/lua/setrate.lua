-- setrate.lua: SetRate (ARGV[5] = 'set': overwrite, reset this client's
-- state) and UpdateRate (ARGV[5] = 'update': overwrite an existing config,
-- keep the history; a type change clears the state).
-- ARGV[1..4]: rate, interval ms, type, keepAlive ms.
-- Reply: {OK, 1 written, 0 not (update of a missing limiter)}.

local L = lib()
if ARGV[5] == 'update' and redis.call('EXISTS', KEYS[1]) == 0 then
  return { L.OK, 0 }
end
if not L.change_config(0, (L.read_config(0)), L.argv_config(1), ARGV[5] == 'update', now, #KEYS) then
  return { L.INVALID_CONFIG } -- a state key of another type
end
return { L.OK, 1 }
