-- acquire.lua: decides acquires on one or more limiters, in the order given,
-- each exactly as if it were a call of its own. Prepended with lib.lua.
--
-- KEYS: five per limiter of a stored rate, three per limiter of a rate
-- given in code (see state_keys in lib.lua). ARGV, per limiter: the rate given in
-- code (rate, interval ms, type, keepAlive ms) or four empty strings for the
-- rate stored in the config hash; the number of its acquires; then each
-- acquire's permits and log member.
--
-- Reply: {now ms} (the time, never a status), then per limiter: for a stored
-- rate its status (NOT_INITIALIZED or INVALID_CONFIG, and nothing more; or
-- OK and the rate: rate, interval ms, type, keepAlive ms); then for each
-- acquire either its remaining permits (>= 0: granted, also when an earlier
-- send of the same member was: a resend never takes twice), or
-- -1 - remaining, the retry ms and the reset ms (denied; a retry of -1: more
-- permits than the rate; of -2: a key of the limiter holds another type of
-- value, so nothing was decided; below -2, -2 - retry: the retry is a bound,
-- never early, not the exact time). Replies are short because every value
-- costs Redis time.
--
-- A limiter whose keys hold values of another type (written by something
-- else) fails alone: its keys are read before anything is written, or a
-- write undone, with errors caught, so the other limiters of the call are
-- decided and nothing is left written for it. A denial's work is bounded whatever the log's length
-- (see walk and DRAIN in lib.lua).
--
-- An allowed acquire on an Overall rate given in code runs TIME, HMGET,
-- DECRBY and ZADD while no grant has left the window since the limiter's
-- last grant and no TTL is due for renewal: the config hash holds when
-- either is next due (exitAt, renewAt: fields Redisson does not read),
-- so the counter is exact without reading the log or a TTL. After that,
-- one ZRANGE reads the oldest grants with their scores, and the grants
-- that left are given back with the same INCRBY that takes the permits.
-- Every other case takes the general path: one acquire after another on
-- the state as load_state reads it, then one write of each key. A denial
-- leaves the keys as they were (on the common path, the DECRBY is undone:
-- two writes that cancel; elsewhere nothing is written unless it changes
-- the state: grants that left the window are dropped, a wrong counter is
-- rebuilt). A grant renews the TTL of every key when due, so each key
-- lives at least one interval past every grant (after that an idle
-- limiter is full again, as if new) and at most keepAlive past the last
-- one.

local out, k = { now, 0 }, 1 -- the reply, sized for one value, and its length
local L -- the library, built on the paths that need it
-- The rate and interval given in code last read: limiters decided together
-- often share them, and reading a number costs Redis time.
local rate_s, rate_n, interval_s, interval_n

-- Each limiter in turn: its keys follow KEYS[o], its arguments start at
-- ARGV[a]. Its acquires append their values to out. (The body is a
-- repeat-until-true block, so that break goes on with the next limiter:
-- a function would cost a closure with all its upvalues on every call.)
local a, o = 1, 0
while a <= #ARGV do
  local m = ARGV[a + 4] == '1' and 1 or tonumber(ARGV[a + 4])
  local after = a + 5 + 2 * m
  local coded = ARGV[a] ~= ''
  local n_keys = coded and 3 or 5 -- see state_keys
  repeat
    -- bad: a key of the limiter holds another type of value. Its acquires
    -- are answered so, and nothing is written for it.
    local bad = false
    local c = redis.pcall('HMGET', KEYS[o + 1], 'rate', 'interval', 'type', 'keepAliveTime', 'exitAt', 'renewAt')
    local rate, interval, typ
    local matched = false -- a rate given in code, as the config holds it
    local keep -- the TTL written keys get: keepAlive (a rate in code), or from stored
    local stored -- the stored config, when the rate is not given in code
    local fresh = false -- a new limiter: no state to read
    local rebuild = false -- the config was missing: rebuild the counter from the log
    local config_written = false -- the config's TTL is fresh
    local new_config -- a config to write once the state is read

    if c.err then
      bad = true
    elseif coded and c[1] == ARGV[a] and c[2] == ARGV[a + 1] and c[3] == ARGV[a + 2] and c[4] == ARGV[a + 3] then
      if ARGV[a] ~= rate_s then
        rate_s, rate_n = ARGV[a], tonumber(ARGV[a])
      end
      if ARGV[a + 1] ~= interval_s then
        interval_s, interval_n = ARGV[a + 1], tonumber(ARGV[a + 1])
      end
      rate, interval, typ, keep = rate_n, interval_n, ARGV[a + 2], ARGV[a + 3]
      matched = true
    elseif coded then
      -- First use, an expired or evicted config, or a rate changed in code:
      -- create or update it here (no "not initialized" race), keeping the
      -- history of the same rate type.
      L = L or lib()
      local new = L.argv_config(a)
      rate, interval, typ, keep = new[1], new[2], new[3], ARGV[a + 3]
      local old, status = L.parse_config(c)
      if status == L.NOT_INITIALIZED then
        local vkey, pkey = state_keys(o, typ, n_keys)
        fresh = redis.call('EXISTS', vkey, pkey) == 0
        rebuild = not fresh
        new_config = new
      else
        bad = not L.change_config(o, old, new, true, now, n_keys)
      end
      config_written = true
    else
      L = L or lib()
      local status
      stored, status = L.parse_config(c)
      if status ~= L.OK then
        k = k + 1
        out[k] = status
        break
      end
      rate, interval, typ = stored[1], stored[2], stored[3]
      out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] = L.OK, rate, interval, tonumber(typ), stored[4]
      k = k + 5
    end

    -- The common case: one acquire on an Overall rate given in code that
    -- the config holds. The config hash also holds, written here, exitAt:
    -- when the log's oldest grant leaves the window, and renewAt: when the
    -- keys' TTL falls below one interval. Before both, the counter is
    -- exact and the TTLs long enough, so a grant is DECRBY and ZADD: with
    -- TIME and HMGET, four commands. After either, one ZRANGE reads the
    -- oldest grants with their scores, those that left the window are
    -- given back and dropped, the TTLs renewed when due, and both times
    -- written again. Anything else (a denial, a missing or garbled
    -- counter, more grants to give back than read, a key of another
    -- type) leaves the keys as they were and takes the general path below.
    local read -- the oldest grants, read by that path: the head of a denial
    if matched and m == 1 and typ == '0' then
      local n = ARGV[a + 5] == '1' and 1 or tonumber(ARGV[a + 5])
      local vkey, pkey = KEYS[o + 2], KEYS[o + 3]
      local exit_at, renew_at = tonumber(c[5]), tonumber(c[6])
      if exit_at and renew_at and now < exit_at and now < renew_at then
        local r = redis.pcall('DECRBY', vkey, ARGV[a + 5])
        if type(r) == 'number' then
          if r >= 0 and r + n <= rate then
            local z = redis.pcall('ZADD', pkey, 'NX', now, ARGV[a + 6])
            if z == 1 then
              k = k + 1
              out[k] = r
              break
            end
            redis.call('INCRBY', vkey, n)
            if z == 0 then
              k = k + 1
              out[k] = r + n -- granted by an earlier send: take nothing
              break
            end
          else
            L = L or lib()
            L.restore(vkey, r + n, n)
          end
        end
      else
        local z = redis.pcall('ZRANGE', pkey, 0, HEAD - 1, 'WITHSCORES')
        if not z.err and #z > 0 then
          local cutoff, gone, released = now - interval, 0, 0
          while gone * 2 < #z and tonumber(z[gone * 2 + 2]) <= cutoff do
            released = released + permits_of(z[gone * 2 + 1])
            gone = gone + 1
          end
          -- The oldest grant left in the window was read: all that left it
          -- were.
          local r = gone * 2 < #z and redis.pcall('INCRBY', vkey, released - n)
          if type(r) == 'number' then
            local old = r + n - released
            if r >= 0 and r + n <= rate and (old ~= 0 or redis.call('PTTL', vkey) ~= -1) then
              if redis.call('ZADD', pkey, 'NX', now, ARGV[a + 6]) == 0 then
                redis.call('INCRBY', vkey, n) -- granted by an earlier send
                r = r + n
              end
              if gone > 0 then
                redis.call('ZREMRANGEBYRANK', pkey, 0, gone - 1)
              end
              if not renew_at or now >= renew_at then
                redis.call('PEXPIRE', KEYS[o + 1], keep)
                redis.call('PEXPIRE', vkey, keep)
                redis.call('PEXPIRE', pkey, keep)
                renew_at = now + tonumber(keep) - interval
              end
              redis.call('HSET', KEYS[o + 1], 'exitAt', tonumber(z[gone * 2 + 2]) + interval, 'renewAt', renew_at)
              k = k + 1
              out[k] = r
              break
            end
            L = L or lib()
            L.restore(vkey, old, n - released)
          end
          if gone == 0 then
            read = z
          end
        end
      end
    end

    local vkey, pkey = state_keys(o, typ or '0', n_keys)
    -- v: the permits available now. ttl: the log's TTL (-2: no log, -1: none).
    -- stale: grants that left the window remain in the log (see load_state).
    local v, rewrite, ttl, released, stale = rate, true, -2, 0, false
    if not fresh and not bad then
      v, rewrite, ttl, released, stale = load_state(vkey, pkey, rate, now - interval, rebuild)
      bad = v == nil
    end
    if new_config and not bad and not fresh then
      L.write_config(o, new_config)
    end
    if bad then
      if not coded then
        -- A stored rate has a status of its own: INVALID_CONFIG, in place
        -- of OK and the rate.
        out[k - 4], out[k - 3], out[k - 2], out[k - 1], out[k] = 2, nil, nil, nil, nil
        k = k - 4
        break
      end
      for _ = 1, m do
        out[k + 1], out[k + 2], out[k + 3] = -1, -2, 0
        k = k + 3
      end
      break
    end

    -- The common case, straight-line: one acquire with a rate given in code,
    -- granted, with no key to fix or renew.
    if m == 1 and coded and not rewrite and ttl >= interval then
      local n = ARGV[a + 5] == '1' and 1 or tonumber(ARGV[a + 5])
      if v >= n then
        if redis.call('ZADD', pkey, 'NX', now, ARGV[a + 6]) == 0 then
          k = k + 1
          out[k] = v -- granted by an earlier send: take nothing
          break
        end
        local r
        if released == 0 then
          r = redis.pcall('DECRBY', vkey, ARGV[a + 5])
        else
          r = redis.pcall('INCRBY', vkey, released - n)
        end
        if type(r) ~= 'number' then
          -- A counter Redis cannot add to: write it whole.
          L = L or lib()
          L.save_state(vkey, pkey, v - n, keep)
          redis.call('PEXPIRE', KEYS[o + 1], keep)
        end
        k = k + 1
        out[k] = v - n
        break
      end
    end

    -- Every other case: acquires one by one, then one write of each key.
    L = L or lib()
    local known -- several acquires: the members the log already holds
    if m > 1 and not fresh then
      local members = {}
      for i = a + 6, after - 1, 2 do
        members[#members + 1] = ARGV[i]
      end
      known = redis.call('ZMSCORE', pkey, unpack(members))
    end

    local granted, adds = 0, {} -- permits taken, and ZADD's score-member pairs
    local head = read -- the log's oldest grants, read by the first denial (see walk)
    local live -- the permits the log holds, once summed (per-client lag check)
    for i = a + 5, after - 1, 2 do
      local n, member = tonumber(ARGV[i]), ARGV[i + 1]
      local grant = v >= n
      if n > rate then
        k = k + 1
        out[k] = -1 - math.max(v, 0)
        k = k + 1
        out[k] = -1
        k = k + 1
        out[k] = 0
      elseif known and known[(i - a - 3) / 2] or not grant and m == 1 and redis.call('ZSCORE', pkey, member) then
        k = k + 1
        out[k] = math.max(v, 0) -- granted by an earlier send (or charged): take nothing
      else
        local at, exact
        if not grant then
          -- Denied, unless the counter lags behind the log: the permits come
          -- back as the oldest grants leave the window, then this call's grants.
          at, head, exact = L.walk(pkey, n - v, head)
          if typ == '1' and not coded and not live then
            -- Another client may have changed this per-client rate, which this
            -- counter then lags behind. ZCARD proves the counter right when
            -- every grant holds a permit, and up to DRAIN members are read
            -- when not (once per limiter and call).
            local card = redis.call('ZCARD', pkey)
            if v + card + granted < rate and card <= DRAIN then
              live = sum_permits(redis.call('ZRANGE', pkey, 0, -1))
            else
              live = -1
            end
            if live >= 0 and v + live + granted < rate then
              v, rewrite = rate - live - granted, true
              at, head, exact = L.walk(pkey, n - v, head)
            end
          end
          grant = v >= n
        end
        if grant then
          v, granted = v - n, granted + n
          adds[#adds + 1] = now
          adds[#adds + 1] = member
          k = k + 1
          out[k] = v
        else
          local retry, reset = interval, interval
          if stale then
            -- Grants that left the window remain to be given back: ask
            -- again at once, as later calls drop them.
            retry = 1
          elseif at then
            retry = math.max(1, math.min(at + interval - now, interval))
          end
          if granted == 0 then
            local last = L.newest(pkey)
            reset = retry
            if last then
              reset = math.max(retry, math.min(last + interval - now, interval))
            end
          end
          k = k + 1
          out[k] = -1 - math.max(v, 0)
          k = k + 1
          out[k] = exact and retry or -2 - retry -- a bound, not the exact time
          k = k + 1
          out[k] = reset
        end
      end
    end

    if granted > 0 and redis.call('ZADD', pkey, 'NX', unpack(adds)) == 0 and m == 1 then
      -- Granted by an earlier send of this acquire: take nothing.
      v, granted = v + granted, 0
      out[k] = v
    end

    -- The counter: written whole with every key's TTL renewed when needed,
    -- else moved by what this call changed, keeping its TTL.
    local renew = rewrite or ttl == -1 or (granted > 0 and (ttl < interval or not coded))
    if not renew and granted ~= released then
      renew = type(redis.pcall('INCRBY', vkey, released - granted)) ~= 'number'
    end
    if renew then
      if stored then
        keep = L.state_ttl(o, stored)
      elseif not config_written then
        redis.call('PEXPIRE', KEYS[o + 1], keep)
      end
      L.save_state(vkey, pkey, v, keep)
    end
    if fresh then
      -- A new limiter's config, written last with its upkeep times: its
      -- log holds only this call's grants, and every key has a new TTL.
      L.write_config(o, new_config, granted > 0 and typ == '0' and { now + interval, now + tonumber(keep) - interval })
    end
  until true
  a, o = after, o + n_keys
end
return out
