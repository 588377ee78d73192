-- lib.lua: what the redlimit scripts share. The Go side prepends this file
-- to the scripts that use it, so each rule below exists once. The hot path
-- of acquire.lua uses only the first helpers; the rest are built by lib(),
-- which a script calls on the paths that need them, so a decision does not
-- pay for closures it does not use.
--
-- Keys, per limiter (all in one Cluster hash slot), after an offset o: for a
-- rate stored in Redis, five:
--   KEYS[o+1] config hash   KEYS[o+2] value   KEYS[o+3] value:<client>
--   KEYS[o+4] permits zset  KEYS[o+5] permits:<client>
-- and for a rate given in code, three, those of its own type:
--   KEYS[o+1] config hash   KEYS[o+2] value (or value:<client>)
--   KEYS[o+3] permits (or permits:<client>)

-- now is the Redis server clock in whole milliseconds, read once at the start
-- of every script call: the only clock the scripts read. (A value, not a
-- function: each function defined here is a closure made on every call.)
local now
do
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  now = t[1] * 1000 + (us - us % 1000) / 1000
end

-- permits_of decodes the permit count of a log member: its last four bytes,
-- little-endian (Redisson's struct 'Bc0I' layout: 0x10, 16 id bytes, uint32).
local function permits_of(m)
  local n = #m
  if n < 4 then
    return 0
  end
  local a, b, c, d = string.byte(m, n - 3, n)
  return a + b * 256 + c * 65536 + d * 16777216
end

-- sum_permits returns the permits held by a list of log members.
local function sum_permits(members)
  local sum = 0
  for i = 1, #members do
    sum = sum + permits_of(members[i])
  end
  return sum
end

-- state_keys returns the counter and log keys of a rate type ('0' Overall,
-- '1' PerClient: this client's own) of the limiter whose n keys follow
-- offset o: five, or three for a rate given in code, whose script declares
-- only the keys of its own type (config, counter, log), as a Redis Cluster
-- wants every key a script declares to be one it touches.
local function state_keys(o, typ, n)
  if n == 3 then
    return KEYS[o + 2], KEYS[o + 3]
  elseif typ == '1' then
    return KEYS[o + 3], KEYS[o + 5]
  end
  return KEYS[o + 2], KEYS[o + 4]
end

-- DRAIN bounds the grants that left the window which one script call
-- reads back into a limiter's counter, and HEAD the oldest grants a denial
-- reads to find its retry time: a call's work does not grow with the log.
local DRAIN, HEAD = 1000, 16

-- load_state returns the permits available now: the counter vkey, with the
-- permits of the log pkey's grants that left the window (score <= cutoff)
-- given back and those grants dropped, at most DRAIN of them (the rest
-- count as out until later calls drop them: stale is true then). The
-- counter is below zero while the log holds more than the rate (a debt:
-- grants written past the rate, see charge.lua, or a rate lowered below
-- the permits out), and later acquires wait until it is paid. A counter
-- that is missing, garbled or above the rate, or any counter when rebuild
-- is set, is rebuilt from the log (Redisson resets a lost counter to the
-- full rate and over-issues); with no log, no permit is out, whatever the
-- counter says. It also returns whether the counter must be written whole,
-- the log's TTL (-2: no log, -1: none), the permits given back and stale.
-- It returns nil when a key holds another type of value (written by
-- something else), having written nothing.
local function load_state(vkey, pkey, rate, cutoff, rebuild)
  local released = 0
  local expired = redis.pcall('ZRANGEBYSCORE', pkey, '-inf', cutoff, 'LIMIT', 0, DRAIN)
  if expired.err then
    return nil
  end
  local stale = #expired == DRAIN
  local v = redis.pcall('GET', vkey)
  if type(v) == 'table' then
    return nil
  end
  v = tonumber(v)
  if #expired > 0 then
    released = sum_permits(expired)
    redis.call('ZREMRANGEBYRANK', pkey, 0, #expired - 1)
  end
  local ttl = redis.call('PTTL', pkey)
  if ttl == -2 then
    return rate, v == nil or v + released ~= rate, ttl, released, false
  elseif rebuild or not v or v % 1 ~= 0 or v + released > rate then
    return rate - sum_permits(redis.call('ZRANGE', pkey, 0, -1)), true, ttl, released, stale
  end
  return v + released, false, ttl, released, stale
end

local function lib()
  -- Status codes: the first element of every reply but acquire's, which has
  -- one per limiter without a rate given in code. delete.lua and expire.lua
  -- stand alone and reply 0, OK. (They are defined in here, not above, so
  -- that the closure of lib, made on every call, captures no upvalue for
  -- them: each costs Redis time on acquire's hot path.)
  local OK, NOT_INITIALIZED, INVALID_CONFIG = 0, 1, 2

  -- int parses a non-negative decimal integer of at most 16 digits, or nil.
  local function int(s)
    if type(s) ~= 'string' or #s > 16 or not string.find(s, '^%d+$') then
      return nil
    end
    return tonumber(s)
  end

  local function fmt(n)
    return string.format('%d', n)
  end

  -- with_permits returns member m carrying p permits instead.
  local function with_permits(m, p)
    local n = #m
    return string.sub(m, 1, n - 4) .. string.char(p % 256, math.floor(p / 256) % 256,
      math.floor(p / 65536) % 256, math.floor(p / 16777216) % 256)
  end

  -- parse_config turns an HMGET of rate, interval, type, keepAliveTime into
  -- {rate, interval, type, keepAlive} and the status OK; or nil and
  -- NOT_INITIALIZED when the limiter has no config, or nil and
  -- INVALID_CONFIG when the stored fields are not a valid rate.
  local function parse_config(c)
    local MAX_PERMITS = 4294967295 -- Go's MaxPermits: a log member counts in a uint32
    local MAX_MS = 9223372036854 -- the longest time.Duration, in ms (292 years)
    if not c[1] or not c[2] or not c[3] then
      return nil, NOT_INITIALIZED
    end
    local rate, interval, keep = int(c[1]), int(c[2]), 0
    if c[4] then
      keep = int(c[4])
    end
    if not rate or rate < 1 or rate > MAX_PERMITS or not interval or interval < 1 or interval > MAX_MS
        or not keep or keep > MAX_MS or (c[3] ~= '0' and c[3] ~= '1') then
      return nil, INVALID_CONFIG
    end
    return { rate, interval, c[3], keep }, OK
  end

  -- read_config reads and parses the config of the limiter at offset o, as
  -- parse_config does; a config key of another type is INVALID_CONFIG.
  local function read_config(o)
    local c = redis.pcall('HMGET', KEYS[o + 1], 'rate', 'interval', 'type', 'keepAliveTime')
    if c.err then
      return nil, INVALID_CONFIG
    end
    return parse_config(c)
  end

  -- argv_config reads a rate from ARGV[i..i+3] (validated by the Go side).
  local function argv_config(i)
    return { tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2], tonumber(ARGV[i + 3]) }
  end


  -- state_ttl returns the TTL (ms) that every written key gets: keepAlive
  -- (which also slides the config's own TTL), else the config's TTL, else
  -- one interval, after which an idle limiter's state equals a fresh one.
  local function state_ttl(o, cfg)
    if cfg[4] > 0 then
      redis.call('PEXPIRE', KEYS[o + 1], cfg[4])
      return cfg[4]
    end
    local ttl = redis.call('PTTL', KEYS[o + 1])
    if ttl > 0 then
      return ttl
    end
    return cfg[2]
  end

  -- save_state writes the counter with a TTL and gives the log the same.
  local function save_state(vkey, pkey, v, ttl)
    redis.call('SET', vkey, fmt(v), 'PX', ttl)
    redis.call('PEXPIRE', pkey, ttl)
  end

  -- restore puts the counter vkey back to old, from old - delta, where
  -- an acquire moved it before it took the general path: when old is 0
  -- and the counter has no TTL, it was missing, and is again.
  local function restore(vkey, old, delta)
    if old == 0 and redis.call('PTTL', vkey) == -1 then
      redis.call('DEL', vkey)
    else
      redis.call('INCRBY', vkey, delta)
    end
  end

  -- emptied notes that grants left the log pkey of the limiter at offset
  -- o before their time: once it is empty (deleted), acquire.lua's exitAt
  -- goes, so that the next grant writes a new log's TTL.
  local function emptied(o, pkey)
    if redis.call('EXISTS', pkey) == 0 then
      redis.call('HDEL', KEYS[o + 1], 'exitAt')
    end
  end

  -- write_config stores cfg in the config hash, with acquire.lua's
  -- exitAt and renewAt when times holds them. keepAlive 0 means no TTL.
  local function write_config(o, cfg, times)
    if times then
      redis.call('HSET', KEYS[o + 1], 'rate', fmt(cfg[1]), 'interval', fmt(cfg[2]),
        'type', cfg[3], 'keepAliveTime', fmt(cfg[4]), 'exitAt', fmt(times[1]), 'renewAt', fmt(times[2]))
    else
      redis.call('HSET', KEYS[o + 1], 'rate', fmt(cfg[1]), 'interval', fmt(cfg[2]),
        'type', cfg[3], 'keepAliveTime', fmt(cfg[4]))
    end
    if cfg[4] > 0 then
      redis.call('PEXPIRE', KEYS[o + 1], cfg[4])
    else
      redis.call('PERSIST', KEYS[o + 1])
    end
  end

  -- change_config replaces old (a config, or nil: none or an invalid one)
  -- with new, on the limiter whose n keys follow offset o. With keep and the same type the history stays: value = rate -
  -- used in the new window, below zero when more is used than the new rate. Otherwise this client's state of
  -- both types is cleared.
  -- It returns false, having written nothing, when a state key holds
  -- another type of value.
  local function change_config(o, old, new, keep, now, n)
    if not keep or not old or old[3] ~= new[3] then
      -- The state of the keys declared: with three, of the new type only
      -- (the other type's expires with its TTL).
      if n == 3 then
        redis.call('DEL', KEYS[o + 1], KEYS[o + 2], KEYS[o + 3])
      else
        redis.call('DEL', KEYS[o + 1], KEYS[o + 2], KEYS[o + 3], KEYS[o + 4], KEYS[o + 5])
      end
      write_config(o, new)
      return true
    end
    local vkey, pkey = state_keys(o, new[3], n)
    local v = load_state(vkey, pkey, new[1], now - new[2], true)
    if not v then
      return false
    end
    -- acquire.lua's times, for the old rate: taken again on the next acquire.
    redis.call('HDEL', KEYS[o + 1], 'exitAt', 'renewAt')
    write_config(o, new)
    save_state(vkey, pkey, v, state_ttl(o, new))
    return true
  end

  -- walk returns the time from which `need` permits are back as the
  -- oldest grants of the log pkey leave the window: the score of the grant
  -- whose leaving frees them (it returns its permits at score + interval).
  -- It reads the oldest HEAD grants (head, once per limiter and call: the
  -- denials of a call share it), then takes each later grant to hold one
  -- permit and reads the grant at that rank: every grant holds at least
  -- one, so the time is never early, and exact when the permits come back
  -- within the head or the later grants hold one permit each. It returns
  -- nil when the log holds fewer, head, and whether the time is exact
  -- (found within the head).
  local function walk(pkey, need, head)
    head = head or redis.call('ZRANGE', pkey, 0, HEAD - 1, 'WITHSCORES')
    local freed = 0
    for i = 1, #head, 2 do
      freed = freed + permits_of(head[i])
      if freed >= need then
        return tonumber(head[i + 1]), head, true
      end
    end
    if #head < 2 * HEAD then
      return nil, head, true
    end
    local rank = HEAD + need - freed - 1
    local at = redis.call('ZRANGE', pkey, rank, rank, 'WITHSCORES')
    if #at == 0 then
      -- Fewer grants than that, holding more: all are back when the newest is.
      at = redis.call('ZRANGE', pkey, -1, -1, 'WITHSCORES')
    end
    return tonumber(at[2]), head, false
  end

  -- newest returns the score of the latest grant in the log, or nil.
  local function newest(pkey)
    local last = redis.call('ZRANGE', pkey, -1, -1, 'WITHSCORES')
    return tonumber(last[2])
  end

  return {
    OK = OK,
    NOT_INITIALIZED = NOT_INITIALIZED,
    INVALID_CONFIG = INVALID_CONFIG,
    int = int,
    fmt = fmt,
    with_permits = with_permits,
    parse_config = parse_config,
    read_config = read_config,
    argv_config = argv_config,
    state_ttl = state_ttl,
    save_state = save_state,
    restore = restore,
    emptied = emptied,
    write_config = write_config,
    change_config = change_config,
    walk = walk,
    newest = newest,
  }
end
