-- expire.lua: ARGV[1] > 0 sets that TTL (ms) on every key of the limiter;
-- ARGV[1] = 0 removes their TTLs. Stands alone (no lib.lua).
-- Reply: {0 (OK), 1 if any key changed}.

local ttl, changed = tonumber(ARGV[1]), 0
-- acquire.lua's renewAt counts on the TTLs it wrote: taken again on the
-- next acquire. (The first key is the config hash, or of another type.)
redis.pcall('HDEL', KEYS[1], 'renewAt')
for i = 1, #KEYS do
  local r
  if ttl > 0 then
    r = redis.call('PEXPIRE', KEYS[i], ARGV[1])
  else
    r = redis.call('PERSIST', KEYS[i])
  end
  if r == 1 then
    changed = 1
  end
end
return { 0, changed }
