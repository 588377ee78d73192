-- charge.lua: writes grants into the log, each at its own time, and settles
-- grants to another number of permits, past the rate if need be: the
-- counter then goes below zero, a debt that later acquires pay by waiting
-- (they are denied until the grants that make it leave the window). It is
-- the one way permits are added to a window after the fact: the grants a
-- local fallback made while Redis could not decide (Limiter.Charge), and
-- the real cost of a request known only after it ran (Limiter.Settle).
--
-- ARGV[1..4]: the rate given in code, or four empty strings; then three
-- values per grant: its log member, then either its time (server ms) and
-- '' to write it, or '' and the member it replaces to settle that one.
-- A grant is written unless it left the window or its member is in the log
-- already (the script of the acquire it stands for ran after all, or this
-- is a resend); a member in the log at a later time (that script ran late,
-- after the grant was made without it) moves back to the grant's time. A
-- settle replaces a grant still in the window, keeping its time; a member
-- of 0 permits takes it out; a grant settled before, or gone, changes
-- nothing, so a settle is made once. Reply: {OK, grants changed}.

local L = lib()
local cfg, status = L.read_config(0)
local rebuild = false
if status == L.NOT_INITIALIZED and ARGV[1] ~= '' then
  -- A rate in code whose config expired: create it, as an acquire would.
  cfg = L.argv_config(1)
  L.write_config(0, cfg)
  rebuild = true
elseif status ~= L.OK then
  return { status }
end

local vkey, pkey = state_keys(0, cfg[3], #KEYS)
local cutoff = now - cfg[2]
-- v counts the permits of the grants that left the window (released):
-- load_state dropped them from the log, so the counter is written even
-- when no grant changes.
local v, rewrite, _, released = load_state(vkey, pkey, cfg[1], cutoff, rebuild)
if not v then
  return { L.INVALID_CONFIG }
end
local changed, delta, written, taken, moved = 0, 0, false, false, false
for i = 5, #ARGV, 3 do
  local member, at, old = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if old ~= '' then
    local score = tonumber(redis.call('ZSCORE', pkey, old))
    if score and score > cutoff then
      redis.call('ZREM', pkey, old)
      local p = permits_of(member)
      if p > 0 then
        redis.call('ZADD', pkey, score, member)
      else
        taken = true
      end
      delta = delta + permits_of(old) - p
      changed = changed + 1
    end
  else
    local t = math.min(tonumber(at), now)
    if t > cutoff then
      local score = tonumber(redis.call('ZSCORE', pkey, member))
      if not score then
        redis.call('ZADD', pkey, t, member)
        delta = delta - permits_of(member)
        changed = changed + 1
        written = true
      elseif t < score then
        redis.call('ZADD', pkey, t, member) -- counted once, at its own time
        moved = true
      end
    end
  end
end
if changed > 0 or rewrite or released > 0 then
  L.save_state(vkey, pkey, math.min(cfg[1], v + delta), L.state_ttl(0, cfg))
end
if taken and not written then
  L.emptied(0, pkey)
elseif written or moved then
  -- A grant older than the log's oldest moves acquire.lua's exitAt: taken
  -- again on the next acquire.
  redis.call('HDEL', KEYS[1], 'exitAt')
end
return { L.OK, changed }
