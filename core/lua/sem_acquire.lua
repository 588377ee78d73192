-- sem_acquire.lua: takes one permit per id of ARGV[5..], all or none, for
-- a lease of ARGV[4] ms from now, if they are available; never waits.
-- Prepended with lib.lua and sem_lib.lua (KEYS and ARGV[1..3]: see there).
--
-- The ids are the caller's: an acquire sent again after its reply was lost
-- finds its first id held and answers as granted, taking nothing more.
--
-- Reply: {NOT_INITIALIZED} (no counter, no limit in code), {INVALID_CONFIG}
-- or {EXCEEDS} (more permits than the limit: never granted); else {OK,
-- granted (1 or 0), the permits available after it (below zero: a debt),
-- when refused the ms until enough leases end for it, by Redis's clock,
-- else 0 (0 too when not known: permits held with no lease)}. A refusal
-- writes nothing unless it changes the state (leases that ended are taken
-- back, a counter is created or brought back to the limit in code).

local v, held = load()
if v == false then
  return { held } -- the status
elseif v == nil and not limit then
  return { NOT_INITIALIZED }
end
local n = #ARGV - 4

local first = redis.call('ZSCORE', KEYS[2], ARGV[5])
if first and tonumber(first) > now then
  local ended = redis.call('ZCOUNT', KEYS[2], '-inf', fmt(now))
  return { OK, 1, available(v, held - ended, ended, 0), 0 }
end

local freed = reclaim()
held = held - freed
local avail = available(v, held, freed, 0)
local up = v == nil or avail > v -- permits came back, or the limit rose
local granted, retry = 0, 0
if n > avail + held then
  if freed > 0 or avail ~= v then
    save(avail)
  end
  return { EXCEEDS }
elseif avail >= n then
  -- (Ids held already, should a resend find some but not the first,
  -- take nothing more.)
  avail, granted = avail - hold(5, fmt(now + tonumber(ARGV[4]))), 1
else
  -- The permits are back once n - avail more leases end: the lease at
  -- that rank, each holding one permit.
  local rank = n - avail - 1
  local at = redis.call('ZRANGE', KEYS[2], rank, rank, 'WITHSCORES')
  if at[2] and tonumber(at[2]) < NO_LEASE then
    retry = math.max(tonumber(at[2]) - now, 1)
  end
end
if granted == 1 or freed > 0 or avail ~= v then
  save(avail)
end
if up then
  publish(avail)
end
return { OK, granted, avail, retry }
