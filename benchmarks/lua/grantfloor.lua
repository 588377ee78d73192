-- grantfloor.lua: the fewest commands that a grant on Redisson's layout
-- needs, and nothing else: TIME, HMGET of the config, DECRBY of the
-- counter and ZADD of the member, as redlimit's acquire runs them on its
-- common path, with no branch, no check and no TTL. A yardstick for one
-- caller (scenario i of the benchmarks), not a rate limiter: it never
-- denies, and its keys never expire.
-- KEYS[1] the config hash, KEYS[2] the counter, KEYS[3] the log.
-- ARGV[1] the log member (21 bytes).

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HMGET', KEYS[1], 'rate', 'interval', 'type', 'keepAliveTime', 'exitAt', 'renewAt')
local v = redis.call('DECRBY', KEYS[2], 1)
redis.call('ZADD', KEYS[3], 'NX', now, ARGV[1])
return { now, v }
