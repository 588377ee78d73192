-- quota.lua: the counter of a calendar quota (a Limiter with WithQuota).
-- Prepended with lib.lua, for now: Redis's clock, the only one read.
--
-- KEYS[1]: the counter, a string "<period start ms>:<used>:<recent>", where
-- recent holds the last RECENT grants the period counted, newest first, 10
-- bytes each: the grant's 6-byte id, the high bit of its first byte set once
-- the grant is settled, then its permits as a little-endian uint32. A grant
-- (ARGV) is such 10 bytes. The counter's TTL runs to its period's end plus
-- MARGIN: an idle counter goes one minute after its period.
--
-- The Go side computes the periods, in the quota's time zone, as
-- [start, end) in Unix ms. A counter whose start is before the period's
-- belongs to a period that has ended: it counts as 0, and is replaced when
-- the period is written.
--
-- ARGV[1]: the limit; ARGV[2]: the call, with its arguments:
--   acquire start end permits grant
--     Reply {OK, now, 1 granted or 0 denied, remaining, ms to the end}. A
--     grant among the recent ones was granted by an earlier send of this
--     call: it is granted again, taking nothing.
--   peek start end        Reply {OK, now, remaining}. Writes nothing.
--   release start end permits
--                         Reply {OK, now, 1 if the counter changed}.
--   ttl start end         Reply {OK, now, 1 if the counter exists}.
--   change, then five values per change: start end grant old known
--     old '': charge grant (count its permits) unless it is among the
--     recent ones. Else settle old to grant's permits, once: if old is among
--     the recent ones and not settled, by the difference from its permits
--     there; if it is not, and known is '', by the difference from old's
--     own (a grant from too long ago to be remembered); otherwise nothing.
--     Each change applies only in its own period, while it is current.
--     Reply {OK, now, changes made}.
-- Every single-period call replies {MISMATCH, now}, writing nothing, when
-- now is not in [start, end): the caller computes the period again from
-- now and sends the call again. A counter that is not a string, or not one
-- this script wrote, fails its callers alone: {INVALID_CONFIG, now}, and
-- nothing is written.

local OK, INVALID_CONFIG, MISMATCH = 0, 2, 3
local RECENT, MARGIN = 6, 60000

local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return { INVALID_CONFIG, now }
end
local start, used, recent = 0, 0, ''
if v then
  local i = string.find(v, ':', 1, true)
  local j = i and string.find(v, ':', i + 1, true)
  local s, u = i and string.sub(v, 1, i - 1), j and string.sub(v, i + 1, j - 1)
  if not j or not string.find(s, '^%d+$') or not string.find(u, '^%d+$') or (#v - j) % 10 ~= 0 then
    return { INVALID_CONFIG, now }
  end
  start, used, recent = tonumber(s), tonumber(u), string.sub(v, j + 1)
end

local limit, call = tonumber(ARGV[1]), ARGV[2]
local period_end -- the end of the period written

-- enter makes [s, e) the counter's period, and reports whether it holds
-- now: a counter of an earlier period counts nothing in it.
local function enter(s, e)
  if now < s or now >= e then
    return false
  end
  if start < s then
    start, used, recent = s, 0, ''
  end
  period_end = e
  return true
end

local function write()
  redis.call('SET', KEYS[1], string.format('%d:%d:', start, used) .. recent, 'PX', period_end - now + MARGIN)
end

-- find returns the position in recent of the grant with g's id, or nil.
local function find(g)
  local id, first = string.sub(g, 2, 6), string.byte(g, 1) % 128
  for i = 1, #recent, 10 do
    if string.byte(recent, i) % 128 == first and string.sub(recent, i + 1, i + 5) == id then
      return i
    end
  end
end

-- remember puts the grant with g's id and p permits first in recent,
-- settled or not, in place of the one at i if given, else dropping the
-- oldest beyond RECENT.
local function remember(g, p, settled, i)
  local first = string.byte(g, 1) % 128
  if settled then
    first = first + 128
  end
  local e = string.char(first) .. string.sub(g, 2, 6) .. string.char(p % 256, math.floor(p / 256) % 256,
    math.floor(p / 65536) % 256, math.floor(p / 16777216) % 256)
  if i then
    recent = string.sub(recent, 1, i - 1) .. e .. string.sub(recent, i + 10)
  else
    recent = string.sub(e .. recent, 1, RECENT * 10)
  end
end

if call == 'change' then
  local changed = 0
  for a = 3, #ARGV, 5 do
    local g, old = ARGV[a + 2], ARGV[a + 3]
    if #g == 10 and (old == '' or #old == 10) and enter(tonumber(ARGV[a]), tonumber(ARGV[a + 1])) then
      local p = permits_of(g)
      if old == '' then
        if not find(g) then
          used = used + p
          remember(g, p, false)
          changed = changed + 1
        end
      else
        local i = find(old)
        if i and string.byte(recent, i) < 128 then
          used = math.max(used + p - permits_of(string.sub(recent, i, i + 9)), 0)
          remember(old, p, true, i)
          changed = changed + 1
        elseif not i and ARGV[a + 4] == '' then
          used = math.max(used + p - permits_of(old), 0)
          remember(old, p, true)
          changed = changed + 1
        end
      end
    end
  end
  if changed > 0 then
    write()
  end
  return { OK, now, changed }
end

local s, e = tonumber(ARGV[3]), tonumber(ARGV[4])
if not enter(s, e) then
  return { MISMATCH, now }
end

if call == 'acquire' then
  local n, g = tonumber(ARGV[5]), ARGV[6]
  if find(g) then
    return { OK, now, 1, math.max(limit - used, 0), e - now }
  elseif used + n > limit then
    return { OK, now, 0, math.max(limit - used, 0), e - now }
  end
  used = used + n
  remember(g, n, false)
  write()
  return { OK, now, 1, limit - used, e - now }
elseif call == 'peek' then
  return { OK, now, math.max(limit - used, 0) }
elseif call == 'release' then
  if used == 0 then
    return { OK, now, 0 }
  end
  used = math.max(used - tonumber(ARGV[5]), 0)
  write()
  return { OK, now, 1 }
elseif call == 'ttl' then
  if not v then
    return { OK, now, 0 }
  end
  redis.call('PEXPIRE', KEYS[1], e - now + MARGIN)
  return { OK, now, 1 }
end
return redis.error_reply('quota.lua: unknown call ' .. tostring(call))
