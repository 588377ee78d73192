-- straightline.lua: the work of one grant on Redisson's layout, in a
-- straight line: no branches, and no TTL bookkeeping beyond reading the
-- counter's. A yardstick for the cost of an acquire script (scenario s of
-- the benchmarks), not a rate limiter: it never denies.
-- KEYS[1] the config hash, KEYS[2] the counter, KEYS[3] the log.
-- ARGV[1] the log member (21 bytes).

local c = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'type', 'keepAliveTime')
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(c[2]))
local v = redis.call('INCRBY', KEYS[2], -1)
redis.call('PTTL', KEYS[2])
redis.call('ZADD', KEYS[3], now, ARGV[1])
return v
