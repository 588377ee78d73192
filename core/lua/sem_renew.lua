-- sem_renew.lua: sets the lease of the ids ARGV[5..] to end ARGV[4] ms
-- from now, by Redis's clock. Prepended with lib.lua and sem_lib.lua (KEYS
-- and ARGV[1..3]: see there).
--
-- An id the semaphore does not hold (Redis lost it, its lease ended and a
-- script took it back, or the lease was made without Redis) is held again:
-- it takes its permit whatever the others hold, so the counter may go below
-- zero, a debt that later acquires wait out. A renewal sent twice sets the
-- same lease.
--
-- Reply: {NOT_INITIALIZED} (no counter, no limit in code), {INVALID_CONFIG};
-- else {OK, held (1: the semaphore held every id, 0: it held some again),
-- the permits available after it}.

local v, held = load()
if v == false then
  return { held } -- the status
elseif v == nil and not limit then
  return { NOT_INITIALIZED }
end
local added = hold(5, fmt(now + tonumber(ARGV[4])))
local freed = reclaim()
local avail = available(v, held + added - freed, freed, added)
save(avail)
if v == nil or avail > v then
  publish(avail)
end
return { OK, added == 0 and 1 or 0, avail }
