-- sem_available.lua: the permits available now, the leases that ended
-- counted as given back. Writes nothing. Prepended with lib.lua and
-- sem_lib.lua (KEYS and ARGV[1..3]: see there).
--
-- Reply: {NOT_INITIALIZED} (no counter, no limit in code), {INVALID_CONFIG};
-- else {OK, the permits available (below zero: a debt)}.

local v, held = load()
if v == false then
  return { held } -- the status
elseif v == nil and not limit then
  return { NOT_INITIALIZED }
end
local ended = redis.call('ZCOUNT', KEYS[2], '-inf', fmt(now))
return { OK, available(v, held - ended, ended, 0) }
