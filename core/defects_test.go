package core_test

// Where Redisson's RRateLimiter goes wrong, what this package does instead:
// one test per behaviour, each saying what Redisson does. Where a case needs
// state only another writer can produce (a Redisson client, a lost key), the
// test writes that state into Redis directly.

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// member builds a log member as Redisson writes it: 0x10, a 16-byte id, the
// permits as a little-endian uint32.
func member(id byte, permits uint32) string {
	m := make([]byte, 21)
	m[0] = 16
	for i := 1; i < 17; i++ {
		m[i] = id
	}
	binary.LittleEndian.PutUint32(m[17:], permits)
	return string(m)
}

// serverMillis returns the backend's Redis TIME in milliseconds.
func serverMillis(t testing.TB, e *env) int64 {
	t.Helper()
	now, err := e.rdb.Time(bg).Result()
	require.NoError(t, err)
	return now.UnixMilli()
}

// assertTTLs fails if any existing state key of l (and its config, when
// withConfig) has no TTL.
func assertTTLs(t *testing.T, e *env, l *core.Limiter, withConfig bool) {
	t.Helper()
	keys := core.Keys(l)
	if !withConfig {
		keys = keys[1:]
	}
	for _, k := range keys {
		ttl, err := e.rdb.PTTL(bg, k).Result()
		require.NoError(t, err)
		if ttl != -2 { // no such key
			assert.Greater(t, ttl, time.Duration(0), "key %q has no TTL", k)
		}
	}
}

// Redisson's availablePermits on a fresh limiter creates the value key with
// no TTL. Ours writes nothing.
func TestAvailablePermitsWritesNothing(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		r := rate(core.Overall, 10, time.Second)
		r.KeepAlive = 5 * time.Second
		require.True(t, trySetRate(t, l, r))
		assert.EqualValues(t, 10, available(t, l))
		assert.EqualValues(t, 1, e.exists(t, core.Keys(l)...), "only the config exists")
		assertTTLs(t, e, l, true)
	})
}

// Redisson's availablePermits strips the value key's TTL; the key then
// outlives the limiter, and the re-created limiter grants 7 of 10 per window
// forever, or fails with a Lua nil-arithmetic error. Ours keeps every key's
// TTL, so they all expire together and a re-created limiter is full.
func TestKeysKeepTheirTTLAndExpireTogether(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		r := rate(core.Overall, 10, 200*time.Millisecond)
		r.KeepAlive = 300 * time.Millisecond
		require.True(t, trySetRate(t, l, r))
		require.True(t, tryAcquire(t, l, 7))
		require.True(t, tryAcquire(t, l, 3))
		assert.False(t, tryAcquire(t, l, 1), "denials write nothing")
		assert.EqualValues(t, 0, available(t, l))
		assertTTLs(t, e, l, true)
		time.Sleep(400 * time.Millisecond)
		assert.Zero(t, e.exists(t, core.Keys(l)...), "every key expired with the keepAlive")

		require.True(t, trySetRate(t, l, r))
		assert.True(t, tryAcquire(t, l, 8))
		assert.True(t, tryAcquire(t, l, 2), "the full rate, not 7")
	})
}

// Redisson's release raises the counter but leaves the log entries, which
// are credited again when they expire: 13 grants within one second for a
// rate of 10. Ours removes what it releases.
func TestReleaseNeverCreditsTwice(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		require.True(t, tryAcquire(t, l, 3)) // T
		require.NoError(t, l.Release(bg, 3))
		time.Sleep(500 * time.Millisecond)
		require.True(t, tryAcquire(t, l, 10)) // T+500
		time.Sleep(500 * time.Millisecond)
		r, err := l.TryAcquire(bg, 1) // T+1000: Redisson grants 3 more here
		require.NoError(t, err)
		assert.False(t, r.Allowed)
		if e.virtual() {
			assert.Equal(t, 500*time.Millisecond, r.RetryAfter, "the T+500 grant comes back at T+1500")
		}
	})
}

// After acquire 1 + release 1 and an expiry, Redisson's availablePermits
// reports 11 of a rate of 10 (Redisson issue #7329).
func TestAvailableNeverAboveRate(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		require.True(t, tryAcquire(t, l, 1))
		require.NoError(t, l.Release(bg, 1))
		time.Sleep(1100 * time.Millisecond)
		assert.EqualValues(t, 10, available(t, l))
		// Even a counter written above the rate by another client.
		require.NoError(t, e.rdb.Set(bg, core.Keys(l)[1], 15, 0).Err())
		assert.EqualValues(t, 10, available(t, l))
		r, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.EqualValues(t, 9, r.Remaining)
	})
}

// Redisson's recount after 9 x (acquire 1, release 1) discards the released
// permits and leaves 1 of 10 (Redisson issue #7342).
func TestReleasedPermitsStayReleased(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		for i := 0; i < 9; i++ {
			require.True(t, tryAcquire(t, l, 1))
			require.NoError(t, l.Release(bg, 1))
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(101 * time.Millisecond)
		r, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		assert.EqualValues(t, 9, r.Remaining)
	})
}

// Redisson grants tryAcquire(-5) (the counter rises above the rate and the
// log stores 0xFFFFFFFB) and tryAcquire(0) (a zero-permit member per call).
// Ours rejects both before any I/O.
func TestNegativeAndZeroPermitsAreRejected(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		for _, n := range []int64{-5, 0} {
			_, err := l.TryAcquire(bg, n)
			require.ErrorIs(t, err, core.ErrInvalidPermits)
			_, err = l.TryAcquireWithin(bg, n, time.Second)
			require.ErrorIs(t, err, core.ErrInvalidPermits)
			require.ErrorIs(t, l.Acquire(bg, n), core.ErrInvalidPermits)
		}
		assert.EqualValues(t, 1, e.exists(t, core.Keys(l)...), "no state was written")
		assert.EqualValues(t, 10, available(t, l))
	})
}

// A zero-permit member (a Redisson tryAcquire(0)) is never purged by
// Redisson and makes its retry hint negative (-4097). Ours purges expired
// members whatever they hold and walks past members that free nothing.
func TestZeroPermitMembersArePurged(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 1, 5*time.Second)))
		keys := core.Keys(l)
		now := serverMillis(t, e)
		require.NoError(t, e.rdb.ZAdd(bg, keys[3], redis.Z{Score: float64(now), Member: member('z', 0)}).Err())
		require.NoError(t, e.rdb.Set(bg, keys[1], 1, 0).Err())
		time.Sleep(5000 * time.Millisecond)
		require.True(t, tryAcquire(t, l, 1)) // T+5000
		time.Sleep(100 * time.Millisecond)
		r, err := l.TryAcquire(bg, 1) // T+5100
		require.NoError(t, err)
		require.False(t, r.Allowed)
		assert.Greater(t, r.RetryAfter, time.Duration(0))
		if e.virtual() {
			assert.Equal(t, 4900*time.Millisecond, r.RetryAfter)
		}
		n, err := e.rdb.ZCard(bg, keys[3]).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "the expired zero-permit member was purged")
	})
}

// A counter below the request with an empty log makes Redisson's script fail
// with "attempt to perform arithmetic on a nil value", and the lost permits
// never come back. Ours rebuilds the counter from the log.
func TestLowCounterWithEmptyLogIsRebuilt(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		require.NoError(t, e.rdb.Set(bg, core.Keys(l)[1], 2, 0).Err()) // value 2, no log
		r, err := l.TryAcquire(bg, 5)
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		assert.EqualValues(t, 5, r.Remaining)
		assertTTLs(t, e, l, false)
	})
}

// skewed runs f on a miniredis whose clock is off the process clock by
// skew, frozen: Redis TIME moves only with SetTime.
func skewed(t *testing.T, skew time.Duration, f func(mr *miniredis.Miniredis, now time.Time, a, b *core.Limiter)) {
	mr := miniredis.RunT(t)
	now := time.Now().Add(skew)
	mr.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	name := uniqueName(t)
	// No denial cache: it counts on the process clock, and Redis's here
	// moves only with SetTime.
	ca, err := core.New(rdb, core.WithDenialCache(0))
	require.NoError(t, err)
	cb, err := core.New(rdb, core.WithDenialCache(0))
	require.NoError(t, err)
	f(mr, now, ca.Limiter(name), cb.Limiter(name))
}

// Redisson stamps permits with each client's clock: a client 5 s fast
// blocks the others for 6 s instead of 1 s, and one 5 s slow lets them take
// twice the rate at once. Ours never reads the process clock: grants
// carry Redis TIME, so the processes' clocks cannot disagree about it. Here
// Redis runs 5 s ahead of (or behind) this process, and two clients share
// rate 2 per second exactly.
func TestClientClockSkewDoesNotMatter(t *testing.T) {
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			skewed(t, skew, func(mr *miniredis.Miniredis, now time.Time, a, b *core.Limiter) {
				require.True(t, trySetRate(t, a, rate(core.Overall, 2, time.Second)))
				require.True(t, tryAcquire(t, a, 2))
				r, err := b.TryAcquire(bg, 1)
				require.NoError(t, err)
				assert.False(t, r.Allowed, "no over-issue")
				assert.Equal(t, time.Second, r.RetryAfter, "not 6 s")
				assert.Equal(t, now.UnixMilli(), core.DecisionTime(r).UnixMilli(), "decided on Redis time")
				mr.SetTime(now.Add(time.Second))
				assert.True(t, tryAcquire(t, b, 2))
			})
		})
	}
}

// A Redisson client with a fast clock writes permits stamped in the future.
// Our retry hint stays within one interval instead of growing by the skew.
func TestFutureStampsKeepRetryWithinOneInterval(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 2, time.Second)))
		keys := core.Keys(l)
		future := serverMillis(t, e) + 5000
		require.NoError(t, e.rdb.ZAdd(bg, keys[3],
			redis.Z{Score: float64(future), Member: member('a', 1)},
			redis.Z{Score: float64(future), Member: member('b', 1)}).Err())
		require.NoError(t, e.rdb.Set(bg, keys[1], 0, 0).Err())
		r, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.False(t, r.Allowed)
		assert.LessOrEqual(t, r.RetryAfter, time.Second)
		assert.LessOrEqual(t, r.ResetAfter, time.Second)
	})
}

// Redisson accepts interval 0 and then grants everything. Ours rejects it,
// and a stored interval of 0 is reported as an invalid config.
func TestIntervalZeroIsRejected(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		_, err := l.TrySetRate(bg, rate(core.Overall, 10, 0))
		require.ErrorIs(t, err, core.ErrInvalidRate)
		require.NoError(t, e.rdb.HSet(bg, l.Name(), "rate", "10", "interval", "0", "type", "0").Err())
		_, err = l.TryAcquire(bg, 1)
		require.ErrorIs(t, err, core.ErrInvalidConfig)
		// A limiter with a code-defined rate replaces the bad config.
		healed := e.client(t).Limiter(e.name, core.WithRate(rate(core.Overall, 10, time.Second)))
		assert.True(t, tryAcquire(t, healed, 1))
		cfg, err := l.Config(bg)
		require.NoError(t, err)
		assert.Equal(t, time.Second, cfg.Interval)
	})
}

// Keys that never expire: Redisson's per-user limiters leak (Redisson issues
// #4007, #4813), legacy setRate keeps a stale config TTL, and a type switch
// leaves the old type's keys behind with no TTL.
func TestKeysNeverLeakWithRate(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 5, 200*time.Millisecond)))
		require.True(t, tryAcquire(t, l, 1))
		cfg, err := l.Config(bg)
		require.NoError(t, err)
		assert.Equal(t, 400*time.Millisecond, cfg.KeepAlive, "a zero keepAlive means two intervals")
		assertTTLs(t, e, l, true)
		time.Sleep(450 * time.Millisecond)
		assert.Zero(t, e.exists(t, core.Keys(l)...))
	})
}

// A code-defined rate renews its keys' TTLs only when the log's falls below
// one interval: after every grant, every key still lives at least one
// interval (so no grant is forgotten while it counts) and at most keepAlive.
func TestKeysLiveAtLeastOneIntervalPastEachGrant(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		const interval, keepAlive = 200 * time.Millisecond, 600 * time.Millisecond
		r := rate(core.Overall, 1000, interval)
		r.KeepAlive = keepAlive
		l := e.limiter(t, core.WithRate(r))
		for i := 0; i < 40; i++ {
			require.True(t, tryAcquire(t, l, 1))
			for _, k := range core.Keys(l)[:2] {
				ttl, err := e.rdb.PTTL(bg, k).Result()
				require.NoError(t, err)
				assert.GreaterOrEqual(t, ttl, interval, "grant %d, key %s", i, k)
				assert.LessOrEqual(t, ttl, keepAlive)
			}
			ttl, err := e.rdb.PTTL(bg, core.Keys(l)[3]).Result()
			require.NoError(t, err)
			assert.GreaterOrEqual(t, ttl, interval)
			time.Sleep(70 * time.Millisecond)
		}
	})
}

func TestKeysNeverLeakPermanentLimiterState(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 5, 200*time.Millisecond)))
		require.True(t, tryAcquire(t, l, 1))
		assertTTLs(t, e, l, false)
		time.Sleep(250 * time.Millisecond)
		assert.EqualValues(t, 1, e.exists(t, core.Keys(l)...), "only the config stays")
		assert.EqualValues(t, 5, available(t, l))
	})
}

func TestKeysNeverLeakSetRateDropsStaleTTL(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 5, time.Second)))
		_, err := l.Expire(bg, 300*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, l.SetRate(bg, rate(core.Overall, 6, time.Second)))
		time.Sleep(400 * time.Millisecond)
		cfg, err := l.Config(bg)
		require.NoError(t, err, "Redisson's limiter would have expired here")
		assert.EqualValues(t, 6, cfg.Permits)
	})
}

func TestKeysNeverLeakTypeSwitch(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.NoError(t, l.SetRate(bg, rate(core.Overall, 5, time.Minute)))
		require.True(t, tryAcquire(t, l, 1))
		require.NoError(t, l.SetRate(bg, rate(core.PerClient, 5, time.Minute)))
		assert.EqualValues(t, 1, e.exists(t, core.Keys(l)...), "Overall state deleted")
	})
}

// Redisson's PER_CLIENT: when one client raises the rate, the other
// clients keep their old counters and stay capped at the old rate. Ours
// notices the lagging counter at its first denial and rebuilds it.
func TestPerClientRateChangeReachesOtherClients(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		a := e.client(t).Limiter(e.name)
		b := e.client(t).Limiter(e.name)
		require.NoError(t, a.SetRate(bg, rate(core.PerClient, 10, time.Minute)))
		require.True(t, tryAcquire(t, a, 10))
		require.True(t, tryAcquire(t, b, 10), "budgets are per client")
		ok, err := a.UpdateRate(bg, rate(core.PerClient, 20, time.Minute))
		require.NoError(t, err)
		require.True(t, ok)
		r, err := b.TryAcquire(bg, 10)
		require.NoError(t, err)
		assert.True(t, r.Allowed, "b sees the new rate")
		assert.EqualValues(t, 0, r.Remaining)
		assert.False(t, tryAcquire(t, b, 1))
	})
}

// Release gives back the most recent grants, shrinking one if needed, so
// the permits come back once: now, not again at expiry.
func TestReleaseNewestFirst(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		require.True(t, tryAcquire(t, l, 3))
		time.Sleep(100 * time.Millisecond)
		require.True(t, tryAcquire(t, l, 2))
		require.NoError(t, l.Release(bg, 4)) // the 2, and 2 of the 3
		assert.EqualValues(t, 9, available(t, l))
		members, err := e.rdb.ZRange(bg, core.Keys(l)[3], 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, members, 1)
		assert.EqualValues(t, 1, binary.LittleEndian.Uint32([]byte(members[0])[17:]), "shrunk to 1 permit")
		time.Sleep(1000 * time.Millisecond)
		assert.EqualValues(t, 10, available(t, l))
	})
}

// Garbage in the config hash or the counter gives a typed error or is
// rebuilt: never a Lua error, a panic, or a corrupted limiter.
func TestGarbageState(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		for _, fields := range [][]any{
			{"rate", "abc", "interval", "1000", "type", "0"},
			{"rate", "-3", "interval", "1000", "type", "0"},
			{"rate", "10", "interval", "1e3", "type", "0"},
			{"rate", "10", "interval", "1000", "type", "7"},
			{"rate", "10", "interval", "1000", "type", "0", "keepAliveTime", "x"},
			{"rate", "99999999999999999999", "interval", "1000", "type", "0"},
		} {
			l := e.client(t).Limiter(uniqueName(t))
			require.NoError(t, e.rdb.HSet(bg, l.Name(), fields...).Err())
			_, err := l.TryAcquire(bg, 1)
			assert.ErrorIs(t, err, core.ErrInvalidConfig, "%v", fields)
			_, err = l.Config(bg)
			assert.ErrorIs(t, err, core.ErrInvalidConfig, "%v", fields)
			_, err = l.AvailablePermits(bg)
			assert.ErrorIs(t, err, core.ErrInvalidConfig, "%v", fields)
			assert.ErrorIs(t, l.Release(bg, 1), core.ErrInvalidConfig, "%v", fields)
		}
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		require.NoError(t, e.rdb.Set(bg, core.Keys(l)[1], "not a number", 0).Err())
		require.NoError(t, e.rdb.ZAdd(bg, core.Keys(l)[3], redis.Z{Score: float64(serverMillis(t, e)), Member: "xy"}).Err())
		r, err := l.TryAcquire(bg, 10)
		require.NoError(t, err)
		assert.True(t, r.Allowed, "counter rebuilt from the log; a short member holds nothing")
	})
}
