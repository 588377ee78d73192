-- Redisson RRateLimiter availablePermits script (redisson/redisson, RedissonRateLimiter.java,
-- Apache License 2.0), reproduced unchanged for the interoperability test only:
-- it is run beside redlimit's scripts on the same keys. Not part of the library.
-- Upstream SHA1 of the concatenated script: 1378f96e73a4251ef63dadab589a062f8276a044
local rate = redis.call('hget', KEYS[1], 'rate');
local interval = redis.call('hget', KEYS[1], 'interval');
local type = redis.call('hget', KEYS[1], 'type');
assert(rate ~= false and interval ~= false and type ~= false, 'RateLimiter is not initialized')
local valueName = KEYS[2];
local permitsName = KEYS[4];
if type == '1' then 
valueName = KEYS[3];
permitsName = KEYS[5];
end;
local currentValue = redis.call('get', valueName); 
if currentValue == false then 
redis.call('set', valueName, rate); 
return rate; 
else 
local expiredValues = redis.call('zrangebyscore', permitsName, 0, tonumber(ARGV[1]) - interval); 
local released = 0; 
for i, v in ipairs(expiredValues) do 
local random, permits = struct.unpack('Bc0I', v);
released = released + permits;
end; 
if released > 0 then 
redis.call('zremrangebyscore', permitsName, 0, tonumber(ARGV[1]) - interval); 
currentValue = tonumber(currentValue) + released; 
redis.call('set', valueName, currentValue);
end;
return currentValue; 
end;
