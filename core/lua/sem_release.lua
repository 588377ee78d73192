-- sem_release.lua: gives back at once the permits of the ids ARGV[4..]
-- that the semaphore holds. Prepended with lib.lua and sem_lib.lua (KEYS
-- and ARGV[1..3]: see there).
--
-- An id no longer held (given back before, or taken back when its lease
-- ended) changes nothing, so a release sent twice gives back once. An id
-- whose lease ended but that no script took back yet is given back too,
-- but does not count as released.
--
-- Reply: {INVALID_CONFIG}; else {OK, released (1: an id was held with
-- its lease running, else 0), the permits available after it}.

local v, held = load()
if v == false then
  return { held } -- the status
end
local live = 0
for i = 4, #ARGV do
  local s = redis.call('ZSCORE', KEYS[2], ARGV[i])
  if s and tonumber(s) > now then
    live = live + 1
  end
end
local removed = 0
each(4, function(i, j)
  removed = removed + redis.call('ZREM', KEYS[2], unpack(ARGV, i, j))
end)
local released = live > 0 and 1 or 0
if v == nil and not limit then
  -- No counter and no limit in code: nothing counts the permits.
  return { OK, released, 0 }
end

local freed = reclaim()
held = held - removed - freed
local avail = available(v, held, freed + removed, 0)
if removed > 0 or freed > 0 or avail ~= v then
  save(avail)
end
if v == nil or avail > v then
  publish(avail)
end
return { OK, released, avail }
