-- setrate.lua: SetRate (ARGV[5] = 'set': overwrite, reset this client's
-- state) and UpdateRate (ARGV[5] = 'update': overwrite an existing config,
-- keep the history; a type change clears the state).
-- ARGV[1..4] rate, interval ms, type, keepAlive ms. Reply: 1 written, 0 not.

local L = lib()
local old = L.read_config(KEYS[1])
if ARGV[5] == 'update' and redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
L.change_config(old, L.argv_config(1), ARGV[5] == 'update', L.now_ms())
return 1
