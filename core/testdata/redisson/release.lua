-- Redisson RRateLimiter release script (redisson/redisson, RedissonRateLimiter.java,
-- Apache License 2.0), reproduced unchanged for the interoperability test only:
-- it is run beside redlimit's scripts on the same keys. Not part of the library.
-- Upstream SHA1 of the concatenated script: fbec405e63ce6ca39accbc290ded190da3cad1cf
local rate = redis.call('hget', KEYS[1], 'rate');
local interval = redis.call('hget', KEYS[1], 'interval');
local type = redis.call('hget', KEYS[1], 'type');
assert(rate ~= false and interval ~= false and type ~= false, 'RateLimiter is not initialized');
local valueName = KEYS[2];
local permitsName = KEYS[4];
if type == '1' then 
    valueName = KEYS[3];
    permitsName = KEYS[5];
end;
local currentValue = redis.call('get', valueName);
if currentValue == false then 
    currentValue = tonumber(rate);
else 
    currentValue = tonumber(currentValue);
end;
local newValue = currentValue + tonumber(ARGV[1]);
if newValue > tonumber(rate) then 
    newValue = tonumber(rate);
end;
redis.call('set', valueName, newValue);
local keepAliveTime = redis.call('hget', KEYS[1], 'keepAliveTime');
if (keepAliveTime ~= false and tonumber(keepAliveTime) > 0) then 
    redis.call('pexpire', KEYS[1], keepAliveTime);
    redis.call('pexpire', valueName, keepAliveTime);
    redis.call('pexpire', permitsName, keepAliveTime);
else 
    local ttl = redis.call('pttl', KEYS[1]);
    if ttl > 0 then 
        redis.call('pexpire', valueName, ttl);
        redis.call('pexpire', permitsName, ttl);
    end;
end;
