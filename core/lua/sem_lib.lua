-- sem_lib.lua: what the semaphore scripts share. The Go side prepends
-- lib.lua (for now, the Redis clock) and this file to each sem_*.lua.
--
-- Redisson's RPermitExpirableSemaphore layout, for a semaphore named N:
--   KEYS[1] N              string: the permits available now (below zero
--                          while more are held than the limit: a debt)
--   KEYS[2] {N}:timeout    sorted set: one member per permit held, its id
--                          (16 raw bytes), scored with the end of its lease
--                          in Unix ms; NO_LEASE: held with no lease (only a
--                          Redisson client writes such permits)
-- The total, the semaphore's limit, is N + ZCARD {N}:timeout: no key holds
-- it. Leases end by Redis's clock (TIME, read once as now in lib.lua):
-- each script first takes back the permits whose lease ended (score <=
-- now), as Redisson's do, at most DRAIN of them per call.
--
-- ARGV[1]: the limit given in code (WithPermits), or '' for the one stored
-- in Redis; ARGV[2]: the channel, redisson_sc:{N}; ARGV[3]: the publish
-- command (PUBLISH, or SPUBLISH on a Redis Cluster: Redisson's default for
-- each); then each script's own.
--
-- A key of another type (written by something else) fails the call with
-- INVALID_CONFIG, having written nothing. Every write gives both keys a TTL:
-- the longest lease held plus KEEP (so an idle semaphore's keys expire, and
-- with a limit in code it is full again), but on a semaphore whose limit
-- lives in Redis alone and whose counter has no TTL (Redisson's
-- trySetPermits writes none): its keys are its only record, and keep none.

-- Status codes, as reply.go reads them.
local OK, NOT_INITIALIZED, INVALID_CONFIG, EXCEEDS = 0, 1, 2, 3
-- Redisson's score of a permit with no lease.
local NO_LEASE = 922337203685477
-- How long the keys outlive the longest lease held, in ms; and the longest
-- TTL they get, that of a time.Duration (292 years): permits held with no
-- lease (NO_LEASE) are held for good.
local KEEP, MAX_TTL = 10000, 9223372036854
-- The most ids one command takes: Lua's stack bounds unpack.
local CHUNK = 1000

local limit = tonumber(ARGV[1]) -- nil: the limit stored in Redis

local function fmt(n)
  return string.format('%d', n)
end

-- load returns the counter (a number, or nil when it is absent or, with a
-- limit in code, garbled: rebuilt from the limit) and the permits held
-- (expired leases included). It returns false and a status when a key
-- holds another type of value, or the counter is not an integer and no
-- limit in code can rebuild it.
local function load()
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' then
    return false, INVALID_CONFIG
  end
  local held = redis.pcall('ZCARD', KEYS[2])
  if type(held) == 'table' then
    return false, INVALID_CONFIG
  end
  if not v then
    return nil, held -- no counter (GET answers false)
  end
  v = tonumber(v)
  if not v or v % 1 ~= 0 then
    if not limit then
      return false, INVALID_CONFIG
    end
    v = nil
  end
  return v, held
end

-- reclaim takes back the permits whose lease ended, the oldest first, at
-- most DRAIN, and returns how many.
local function reclaim()
  local n = redis.call('ZCOUNT', KEYS[2], '-inf', fmt(now))
  if n == 0 then
    return 0
  end
  n = math.min(n, DRAIN)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - 1)
  return n
end

-- available returns the permits available while held permits are held:
-- the limit in code less them, or the stored counter v plus what the
-- script gave back (freed) less what it took (taken).
local function available(v, held, freed, taken)
  if limit then
    return limit - held
  end
  return v + freed - taken
end

-- save writes the counter v and gives both keys their TTL (see above).
local function save(v)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  local ttl = KEEP
  if last[2] then
    ttl = math.min(math.max(tonumber(last[2]) - now, 0) + KEEP, MAX_TTL)
  end
  if not limit then
    local old = redis.call('PTTL', KEYS[1])
    if old == -1 then
      redis.call('SET', KEYS[1], fmt(v))
      redis.call('PERSIST', KEYS[2])
      return
    end
    ttl = math.max(ttl, old)
  end
  redis.call('SET', KEYS[1], fmt(v), 'PX', fmt(ttl))
  redis.call('PEXPIRE', KEYS[2], fmt(ttl))
end

-- publish tells the semaphore's waiters, Redisson's included, that v
-- permits are available, when v > 0 (Redisson's listeners take the
-- payload as a count of waiters to wake: never zero or negative). A
-- SPUBLISH that the server does not know (a Redis 6 Cluster) falls back
-- to PUBLISH, as Redisson does there; a publish refused fails nothing.
local function publish(v)
  if v <= 0 then
    return
  end
  local r = redis.pcall(ARGV[3], ARGV[2], fmt(v))
  if type(r) == 'table' and r.err and ARGV[3] ~= 'PUBLISH' then
    redis.pcall('PUBLISH', ARGV[2], fmt(v))
  end
end

-- each calls f(i, j) on the ranges of ARGV from i0 on, CHUNK at most.
local function each(i0, f)
  for i = i0, #ARGV, CHUNK do
    f(i, math.min(i + CHUNK - 1, #ARGV))
  end
end

-- hold adds (or moves) the ids ARGV[i0..] with the lease end score, and
-- returns how many were not held before.
local function hold(i0, score)
  local added = 0
  each(i0, function(i, j)
    local args = {}
    for k = i, j do
      args[#args + 1] = score
      args[#args + 1] = ARGV[k]
    end
    added = added + redis.call('ZADD', KEYS[2], unpack(args))
  end)
  return added
end
