-- Redisson RRateLimiter tryAcquire script (redisson/redisson, RedissonRateLimiter.java,
-- Apache License 2.0), reproduced unchanged for the interoperability test only:
-- it is run beside redlimit's scripts on the same keys. Not part of the library.
-- Upstream SHA1 of the concatenated script: 861d9229367b5aa9889ee26c5c31be7baeba2153
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
assert(tonumber(rate) >= tonumber(ARGV[1]), 'Requested permits amount cannot exceed defined rate'); 
local currentValue = redis.call('get', valueName); 
local res;
if currentValue ~= false then 
local expiredValues = redis.call('zrangebyscore', permitsName, 0, tonumber(ARGV[2]) - interval); 
local released = 0; 
for i, v in ipairs(expiredValues) do 
local random, permits = struct.unpack('Bc0I', v);
released = released + permits;
end; 
if released > 0 then 
redis.call('zremrangebyscore', permitsName, 0, tonumber(ARGV[2]) - interval); 
if tonumber(currentValue) + released > tonumber(rate) then 
local values = redis.call('zrange', permitsName, 0, -1); 
local used = 0; 
for i, v in ipairs(values) do 
local random, permits = struct.unpack('Bc0I', v);
used = used + permits;
end; 
currentValue = tonumber(rate) - used; 
else 
currentValue = tonumber(currentValue) + released; 
end; 
redis.call('set', valueName, currentValue);
end;
if tonumber(currentValue) < tonumber(ARGV[1]) then 
local firstValue = redis.call('zrange', permitsName, 0, 0, 'withscores'); 
res = 3 + interval - (tonumber(ARGV[2]) - tonumber(firstValue[2]));
else 
redis.call('zadd', permitsName, ARGV[2], struct.pack('Bc0I', string.len(ARGV[3]), ARGV[3], ARGV[1])); 
redis.call('decrby', valueName, ARGV[1]); 
res = nil; 
end; 
else 
redis.call('set', valueName, rate); 
redis.call('zadd', permitsName, ARGV[2], struct.pack('Bc0I', string.len(ARGV[3]), ARGV[3], ARGV[1])); 
redis.call('decrby', valueName, ARGV[1]); 
res = nil; 
end;
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
return res;
