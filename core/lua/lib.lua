-- lib.lua: helpers shared by every redlimit script. The Go side prepends this
-- file to each script body, so each rule below exists exactly once. The
-- helpers are built by lib(), which a script calls only on the paths that
-- need them: the hot path of acquire.lua creates no closure.
--
-- Keys (all in one Cluster hash slot):
--   KEYS[1] config hash   KEYS[2] value   KEYS[3] value:<client>
--   KEYS[4] permits zset  KEYS[5] permits:<client>
-- Reply codes (first element of every reply):
--   0 ok, 1 not initialized, 2 permits exceed rate, 3 stored config invalid.

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

local function lib()
  local MAX_PERMITS = 4294967295

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

  -- now_ms is the Redis server clock in milliseconds: the only clock used.
  local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end

  -- with_permits returns member m carrying p permits instead.
  local function with_permits(m, p)
    local n = #m
    return string.sub(m, 1, n - 4) .. string.char(p % 256, math.floor(p / 256) % 256,
      math.floor(p / 65536) % 256, math.floor(p / 16777216) % 256)
  end

  -- parse_config turns an HMGET of rate, interval, type, keepAliveTime into
  -- {rate, interval, type, keepAlive}, nil when the limiter is not
  -- initialized, or false when the stored fields are not a valid rate.
  local function parse_config(c)
    if not c[1] or not c[2] or not c[3] then
      return nil
    end
    local rate, interval, keep = int(c[1]), int(c[2]), 0
    if c[4] then
      keep = int(c[4])
    end
    if not rate or rate < 1 or rate > MAX_PERMITS or not interval or interval < 1
        or not keep or (c[3] ~= '0' and c[3] ~= '1') then
      return false
    end
    return { rate, interval, c[3], keep }
  end

  local function read_config(key)
    return parse_config(redis.call('HMGET', key, 'rate', 'interval', 'type', 'keepAliveTime'))
  end

  -- argv_config reads a code-defined rate from ARGV[i..i+3].
  local function argv_config(i)
    return { int(ARGV[i]), int(ARGV[i + 1]), ARGV[i + 2], int(ARGV[i + 3]) }
  end

  local function same_config(a, b)
    return a and b and a[1] == b[1] and a[2] == b[2] and a[3] == b[3] and a[4] == b[4]
  end

  -- state_keys picks the value and log keys of the rate type.
  local function state_keys(cfg)
    if cfg[3] == '1' then
      return KEYS[3], KEYS[5]
    end
    return KEYS[2], KEYS[4]
  end

  -- sum_live returns the permits held by every member of the log.
  local function sum_live(pkey)
    local used = 0
    local members = redis.call('ZRANGE', pkey, 0, -1)
    for i = 1, #members do
      used = used + permits_of(members[i])
    end
    return used
  end

  -- recount drops the members that left the window and derives the counter
  -- from the log: rate - sum(live), never below zero.
  local function recount(pkey, rate, cutoff)
    redis.call('ZREMRANGEBYSCORE', pkey, '-inf', cutoff)
    local v = rate - sum_live(pkey)
    if v < 0 then
      v = 0
    end
    return v
  end

  -- load_state returns the permits available now and whether the counter
  -- changed. Members with score <= now - interval are credited back. A missing,
  -- garbled or over-full counter is rebuilt from the log, so the counter never
  -- exceeds the rate and never goes negative (Redisson resets a missing counter
  -- to the full rate and over-issues).
  local function load_state(vkey, pkey, rate, cutoff, force)
    local raw = redis.call('GET', vkey)
    local v = int(raw)
    if force or not v then
      if not raw and redis.call('EXISTS', pkey) == 0 then
        return rate, true
      end
      return recount(pkey, rate, cutoff), true
    end
    local expired = redis.call('ZRANGEBYSCORE', pkey, '-inf', cutoff)
    local released = 0
    for i = 1, #expired do
      released = released + permits_of(expired[i])
    end
    if #expired > 0 then
      redis.call('ZREMRANGEBYSCORE', pkey, '-inf', cutoff)
    end
    if v + released > rate then
      return recount(pkey, rate, cutoff), true
    end
    return v + released, #expired > 0
  end

  -- state_ttl returns the TTL every written key gets: keepAlive (which also
  -- slides the config's own TTL), else the config's TTL, else one interval,
  -- after which an idle limiter's state equals a fresh one.
  local function state_ttl(cfg)
    if cfg[4] > 0 then
      redis.call('PEXPIRE', KEYS[1], cfg[4])
      return cfg[4]
    end
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then
      return ttl
    end
    return cfg[2]
  end

  -- save_state writes the counter and gives both state keys the TTL.
  local function save_state(vkey, pkey, v, cfg)
    local ttl = state_ttl(cfg)
    redis.call('SET', vkey, fmt(v), 'PX', ttl)
    redis.call('PEXPIRE', pkey, ttl)
  end

  -- write_config stores cfg in the config hash. keepAlive 0 means no TTL.
  local function write_config(cfg)
    redis.call('HSET', KEYS[1], 'rate', fmt(cfg[1]), 'interval', fmt(cfg[2]),
      'type', cfg[3], 'keepAliveTime', fmt(cfg[4]))
    if cfg[4] > 0 then
      redis.call('PEXPIRE', KEYS[1], cfg[4])
    else
      redis.call('PERSIST', KEYS[1])
    end
  end

  -- change_config replaces old (a config, false or nil) with new. With keep
  -- and the same type the history stays: value = max(0, rate - used in the new
  -- window). Otherwise this client's state of both types is cleared.
  local function change_config(old, new, keep, now)
    write_config(new)
    if not keep or not old or old[3] ~= new[3] then
      redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
      return
    end
    local vkey, pkey = state_keys(new)
    local v = recount(pkey, new[1], now - new[2])
    save_state(vkey, pkey, v, new)
  end

  return {
    int = int,
    fmt = fmt,
    now_ms = now_ms,
    with_permits = with_permits,
    parse_config = parse_config,
    read_config = read_config,
    argv_config = argv_config,
    same_config = same_config,
    state_keys = state_keys,
    sum_live = sum_live,
    recount = recount,
    load_state = load_state,
    state_ttl = state_ttl,
    save_state = save_state,
    write_config = write_config,
    change_config = change_config,
    MAX_PERMITS = MAX_PERMITS,
  }
end
