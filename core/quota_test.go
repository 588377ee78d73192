package core_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// counter returns the quota's counter key.
func quotaKey(l *core.Limiter) string { return core.Keys(l)[0] }

// redisTime returns the backend's Redis TIME.
func redisTime(t testing.TB, e *env) time.Time {
	t.Helper()
	return time.UnixMilli(serverMillis(t, e))
}

// assertRetryToBoundary checks that a refused acquire on l, of quota q,
// is told to retry exactly at the end of the period by Redis's clock, as
// Redis's clock read before and after the call bounds it, and returns it.
func assertRetryToBoundary(t *testing.T, e *env, l *core.Limiter, q core.Quota, permits int64) core.Result {
	t.Helper()
	before := redisTime(t, e)
	res, err := l.TryAcquire(bg, permits)
	require.NoError(t, err)
	after := redisTime(t, e)
	start, end := core.QuotaBounds(q, before)
	require.False(t, res.Allowed)
	assert.True(t, res.Grant == (core.Grant{}), "a refusal grants nothing")
	assert.GreaterOrEqual(t, res.RetryAfter, end.Sub(after)-time.Millisecond, "never early: at the boundary")
	assert.LessOrEqual(t, res.RetryAfter, end.Sub(before)+time.Millisecond, "at the boundary")
	assert.Equal(t, res.RetryAfter, res.ResetAfter)
	assert.Equal(t, core.Rate{Permits: q.Limit, Interval: end.Sub(start)}, res.Rate, "the quota, as a rate of its period")
	return res
}

// A quota of N a day grants N, refuses the next until the day ends by
// Redis's clock, with the time to its end, and grants N again from then.
func TestQuotaRefusesUntilTheBoundary(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		q := core.Quota{Limit: 3, Period: core.Day, Location: zone(t, "Europe/Paris")}
		l := e.limiter(t, core.WithQuota(q))
		for want := int64(2); want >= 0; want-- {
			res, err := l.TryAcquire(bg, 1)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			assert.Equal(t, want, res.Remaining)
			assert.Zero(t, res.RetryAfter)
			assert.False(t, res.Grant == (core.Grant{}))
		}
		res := assertRetryToBoundary(t, e, l, q, 1)
		assert.Zero(t, res.Remaining)
		assert.EqualValues(t, 0, available(t, l))
		if !e.virtual() {
			return
		}
		time.Sleep(res.RetryAfter - 2*time.Millisecond)
		late := assertRetryToBoundary(t, e, l, q, 1)
		assert.LessOrEqual(t, late.RetryAfter, 2*time.Millisecond, "counts down to the boundary")
		time.Sleep(late.RetryAfter)
		res, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "a new day")
		assert.EqualValues(t, 2, res.Remaining)
		assert.Equal(t, 24*time.Hour, res.Rate.Interval)
	})
}

// A quota's counter takes the same memory whatever its limit and however
// many grants it counted: at most 200 bytes (MEMORY USAGE, jemalloc) after
// 100 000 grants, with settles and refunds among them.
func TestQuotaMemoryPerKey(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter("api:user:2001:db8:1234:5678::/64", core.WithQuota(core.Quota{Limit: core.MaxPermits, Period: core.Month}))
		t.Cleanup(func() { _, _ = l.Delete(bg) })
		_, _ = l.Delete(bg)
		const grants, workers = 100_000, 16
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range grants / workers {
					res, err := l.TryAcquire(bg, int64(1+i%1000))
					if !assert.NoError(t, err) || !assert.True(t, res.Allowed) {
						return
					}
					switch i % 100 {
					case 0:
						_, err = l.Settle(bg, res.Grant, 1_000_000)
					case 1:
						_, err = l.Refund(bg, res.Grant)
					}
					if !assert.NoError(t, err, "worker %d", w) {
						return
					}
				}
			})
		}
		wg.Wait()
		n, err := e.rdb.MemoryUsage(bg, quotaKey(l)).Result()
		require.NoError(t, err)
		v, err := e.rdb.Get(bg, quotaKey(l)).Result()
		require.NoError(t, err)
		// MEMORY USAGE counts what the allocator hands out: Redis's
		// jemalloc; a server built with libc malloc (the Valkey of CI)
		// rounds the same key up to 16 bytes more.
		mem, err := e.rdb.InfoMap(bg, "memory").Result()
		require.NoError(t, err)
		allocator, most := mem["Memory"]["mem_allocator"], int64(200)
		if strings.HasPrefix(allocator, "libc") {
			most += 16
		}
		t.Logf("key %q: %d bytes (MEMORY USAGE, %s), its value %d bytes", quotaKey(l), n, allocator, len(v))
		assert.LessOrEqual(t, n, most)
	})
}

// Refund gives back exactly its grant, once, while its period is current,
// a grant older than the counter remembers too; Release takes permits off
// the period's count, down to 0.
func TestQuotaRefundGivesBackTheGrant(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithQuota(core.Quota{Limit: 100, Period: core.Month}))
		a := mustGrant(t, l, 7)
		b := mustGrant(t, l, 5)
		assert.True(t, refund(t, l, a))
		assert.EqualValues(t, 95, available(t, l), "a's 7 back, b's 5 out")
		assert.False(t, refund(t, l, a), "once")
		assert.EqualValues(t, 95, available(t, l))

		for range 10 { // more grants than the counter remembers
			mustGrant(t, l, 1)
		}
		assert.True(t, refund(t, l, b), "a grant from too long ago to be remembered")
		assert.EqualValues(t, 90, available(t, l), "b's 5 back")
		assert.False(t, refund(t, l, b), "once: remembered as refunded")
		assert.EqualValues(t, 90, available(t, l))

		require.NoError(t, l.Release(bg, 3))
		assert.EqualValues(t, 93, available(t, l))
		require.NoError(t, l.Release(bg, 100))
		assert.EqualValues(t, 100, available(t, l), "down to 0 at most")
		assert.Empty(t, keysWithoutTTL(t, e, l))

		if !e.virtual() {
			return
		}
		g := mustGrant(t, l, 4)
		_, end := core.QuotaBounds(core.Quota{Period: core.Month}, redisTime(t, e))
		time.Sleep(time.Until(end))
		mustGrant(t, l, 1)
		assert.False(t, refund(t, l, g), "its period ended")
		assert.EqualValues(t, 99, available(t, l), "the new period's count is its own")
	})
}

// Settle changes a grant's cost in its period, once: below gives the
// difference back, above charges it, past the limit if need be, a debt
// that refuses every acquire until the period ends.
func TestQuotaSettleAboveTheLimitIsADebt(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		q := core.Quota{Limit: 10, Period: core.Day, Location: zone(t, "America/New_York")}
		l := c.Limiter(e.name, core.WithQuota(q))
		below := grantOf(t, l, 4)
		assert.True(t, settle(t, l, below, 1), "below")
		assert.EqualValues(t, 9, available(t, l))
		assert.False(t, settle(t, l, below, 8), "once")
		assert.False(t, refund(t, l, below), "a settled grant is not refunded")
		assert.EqualValues(t, 9, available(t, l))

		above := grantOf(t, l, 2)
		assert.True(t, settle(t, l, above, 25), "above, past the limit")
		assert.EqualValues(t, 0, available(t, l), "never negative")
		res := assertRetryToBoundary(t, e, l, q, 1)
		assert.Zero(t, res.Remaining)
		require.NoError(t, l.Release(bg, 10))
		assert.EqualValues(t, 0, available(t, l), "16 over the limit, less 10: still in debt")
		assert.Empty(t, keysWithoutTTL(t, e, l))

		if !e.virtual() {
			return
		}
		time.Sleep(res.RetryAfter)
		assert.True(t, tryAcquire(t, l, 1), "the debt ends with its period")
		assert.EqualValues(t, 9, available(t, l))
		assert.False(t, settle(t, l, above, 0), "its period ended")
	})
}

// Charge counts a grant made without Redis in its period, once, if that
// period is still current by Redis's clock; the limiter's next call pays
// it, past the limit if need be.
func TestQuotaChargeCountsInItsPeriod(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		q := core.Quota{Limit: 10, Period: core.Day, Location: zone(t, "Asia/Kolkata")}
		l := c.Limiter(e.name, core.WithQuota(q))
		require.True(t, tryAcquire(t, l, 2))
		g := core.QuotaGrantAt(3, time.Now())
		l.Charge(g, g)
		assert.EqualValues(t, 2, core.Owed(c), "kept until the limiter's next call")
		assert.EqualValues(t, 5, available(t, l), "paid with it: 2 + 3, counted once")
		assert.Zero(t, core.Owed(c))
		l.Charge(g, core.QuotaGrantAt(4, time.Now().Add(-48*time.Hour)), core.Grant{})
		l.Charge(core.GrantAt(1, time.Now())) // a rate's grant: not this limiter's
		assert.EqualValues(t, 5, available(t, l), "again, of a period that ended, zero, or a rate's: nothing")

		ctx, cancel := context.WithCancel(bg)
		cancel()
		res, err := l.TryAcquire(ctx, 4)
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, res.Grant == (core.Grant{}), "the grant the failed call asked for")
		l.Charge(res.Grant)
		assert.EqualValues(t, 1, available(t, l))

		l.Charge(core.QuotaGrantAt(6, time.Now()))
		assert.EqualValues(t, 0, available(t, l), "15 in a quota of 10: a debt")
		assertRetryToBoundary(t, e, l, q, 1)
		assert.Empty(t, keysWithoutTTL(t, e, l))

		if !e.virtual() {
			return
		}
		// Redis's clock in the next day, this process's still in this one:
		// the charge's period has ended by Redis's clock, and counts nothing.
		_, end := core.QuotaBounds(q, redisTime(t, e))
		e.mr.SetTime(end.Add(time.Hour))
		l.Charge(core.QuotaGrantAt(2, time.Now()))
		assert.EqualValues(t, 10, available(t, l), "a new day, the charge of the last counted nowhere")
		assert.Zero(t, core.Owed(c))
		time.Sleep(2 * core.FlushEvery) // the Client's writer ends with the bubble
	})
}

// A refund or settle Redis could not take is kept and made with the
// limiter's next call; a refund of a grant whose acquire got no answer
// waits until its script, should it run late, has run, and gives back only
// a grant the counter knows.
func TestQuotaOwedRefunds(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithQuota(core.Quota{Limit: 10, Period: core.Week}))
		g := mustGrant(t, l, 3)
		ctx, cancel := context.WithCancel(bg)
		cancel()
		ok, err := l.Refund(ctx, g)
		require.Error(t, err)
		assert.False(t, ok)
		assert.EqualValues(t, 1, core.Owed(c))
		assert.EqualValues(t, 10, available(t, l), "made with the next call")
		assert.Zero(t, core.Owed(c))

		ran := mustGrant(t, l, 4)
		ok, err = l.Refund(bg, core.Lost(ran))
		require.NoError(t, err)
		assert.False(t, ok, "kept, for later")
		ok, err = l.Refund(bg, core.Lost(core.QuotaGrantAt(5, time.Now())))
		require.NoError(t, err)
		assert.False(t, ok)
		assert.EqualValues(t, 2, core.Owed(c))
		assert.EqualValues(t, 6, available(t, l), "not yet: the acquire's script may still run")
		time.Sleep(3 * time.Second)
		assert.EqualValues(t, 10, available(t, l), "the grant that ran is given back, the one that did not changes nothing")
		assert.Zero(t, core.Owed(c))

		// A local fallback's grant, charged, then refunded before Redis
		// answers again: nothing counts. Refunded without a charge:
		// nothing is given back.
		local := core.QuotaGrantAt(2, time.Now())
		l.Charge(local)
		ok, err = l.Refund(bg, local)
		require.NoError(t, err)
		assert.False(t, ok, "kept, after its charge")
		_, err = l.Refund(bg, core.QuotaGrantAt(3, time.Now()))
		require.NoError(t, err)
		require.True(t, tryAcquire(t, l, 1))
		assert.EqualValues(t, 9, available(t, l), "the charge and its refund, then the acquire")
		assert.Zero(t, core.Owed(c))
		time.Sleep(2 * core.FlushEvery) // the Client's writer ends with the bubble
	})
}

// A resent call is harmless while its grant is among the last six that
// its period counted: an acquire takes once, a settle and a refund change
// once, a charge counts once. Beyond, a resent acquire takes again.
func TestQuotaResendIsHarmless(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		h := addHook(e)
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithQuota(core.Quota{Limit: 100, Period: core.Week}))
		h.resend.Store(true)
		a := grantOf(t, l, 10)
		assert.EqualValues(t, 90, available(t, l), "sent twice, taken once")
		_, err := l.Settle(bg, a, 30)
		require.NoError(t, err)
		assert.EqualValues(t, 70, available(t, l), "settled once")
		_, err = l.Refund(bg, grantOf(t, l, 5))
		require.NoError(t, err)
		assert.EqualValues(t, 70, available(t, l), "refunded once")
		h.resend.Store(false)

		b := grantOf(t, l, 1)
		res, err := core.QuotaAcquireAgain(bg, l, b)
		require.NoError(t, err)
		assert.True(t, res.Allowed)
		assert.EqualValues(t, 69, res.Remaining, "a resend takes nothing")
		for range 6 {
			grantOf(t, l, 1)
		}
		res, err = core.QuotaAcquireAgain(bg, l, b)
		require.NoError(t, err)
		assert.True(t, res.Allowed)
		assert.EqualValues(t, 62, res.Remaining, "six grants later, the counter no longer knows it: it takes again")
	})
}

// A counter of another type, or a string no limiter wrote, fails its own
// limiter's calls with ErrInvalidConfig, and is left as it is; a limiter
// in the same slot decides as usual.
func TestQuotaPoisonedKeyFailsAlone(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		q := core.WithQuota(core.Quota{Limit: 5, Period: core.Day})
		tag := "{" + e.name + "}"
		bad, good := c.Limiter(tag+"bad", q), c.Limiter(tag+"good", q)
		for _, poison := range []struct {
			what  string
			write func() error
		}{
			{"a hash", func() error { return e.rdb.HSet(bg, quotaKey(bad), "used", "0").Err() }},
			{"a list", func() error { return e.rdb.RPush(bg, quotaKey(bad), "x").Err() }},
			{"a string of its own", func() error { return e.rdb.Set(bg, quotaKey(bad), "42", 0).Err() }},
		} {
			require.NoError(t, e.rdb.Del(bg, quotaKey(bad)).Err())
			g := mustGrant(t, bad, 1)
			require.NoError(t, e.rdb.Del(bg, quotaKey(bad)).Err())
			require.NoError(t, poison.write())
			before := snapshot(t, e, quotaKey(bad))

			res, err := bad.TryAcquire(bg, 1)
			require.ErrorIs(t, err, core.ErrInvalidConfig, poison.what)
			assert.True(t, res.Grant == (core.Grant{}), "Redis answered: no grant to charge")
			_, err = bad.AvailablePermits(bg)
			assert.ErrorIs(t, err, core.ErrInvalidConfig, poison.what)
			_, err = bad.Refund(bg, g)
			assert.ErrorIs(t, err, core.ErrInvalidConfig, poison.what)
			_, err = bad.Settle(bg, g, 3)
			assert.ErrorIs(t, err, core.ErrInvalidConfig, poison.what)
			assert.ErrorIs(t, bad.Release(bg, 1), core.ErrInvalidConfig, poison.what)
			_, err = bad.ClearExpire(bg)
			assert.ErrorIs(t, err, core.ErrInvalidConfig, poison.what)
			assert.True(t, tryAcquire(t, good, 1), "%s: the other limiter decides", poison.what)

			assert.Equal(t, before, snapshot(t, e, quotaKey(bad)), "%s: left as it was", poison.what)
			ttl, err := e.rdb.PTTL(bg, quotaKey(bad)).Result()
			require.NoError(t, err)
			assert.Equal(t, time.Duration(-1), ttl, "%s: no TTL written", poison.what)
			deleted, err := bad.Delete(bg)
			require.NoError(t, err)
			assert.True(t, deleted, "deleting it mends it")
			assert.True(t, tryAcquire(t, bad, 1))
		}
	})
}

// snapshot returns the type and value of key, of a string, hash or list.
func snapshot(t *testing.T, e *env, key string) string {
	t.Helper()
	typ, err := e.rdb.Type(bg, key).Result()
	require.NoError(t, err)
	var v any
	switch typ {
	case "string":
		v, err = e.rdb.Get(bg, key).Result()
	case "hash":
		v, err = e.rdb.HGetAll(bg, key).Result()
	case "list":
		v, err = e.rdb.LRange(bg, key, 0, -1).Result()
	}
	require.NoError(t, err)
	return fmt.Sprint(typ, v)
}

// The counter always has a TTL, to at most a minute past its period's end
// after every call; an idle counter goes once its period is over.
func TestQuotaCounterExpiresAfterItsPeriod(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		q := core.Quota{Limit: 1000, Period: core.Week, Location: zone(t, "Asia/Kathmandu")}
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithQuota(q))
		// step makes a call, then checks the counter's TTL against Redis's
		// clock read before the call and after the TTL.
		step := func(what string, call func()) {
			t.Helper()
			before := redisTime(t, e)
			call()
			ttl, err := e.rdb.PTTL(bg, quotaKey(l)).Result()
			require.NoError(t, err)
			after := redisTime(t, e)
			_, end := core.QuotaBounds(q, before)
			assert.Greater(t, ttl, end.Sub(after), "%s: outlives its period", what)
			assert.LessOrEqual(t, ttl, end.Sub(before)+core.QuotaMargin, "%s: by a minute at most", what)
		}
		var g core.Grant
		step("acquire", func() { g = mustGrant(t, l, 5) })
		step("settle", func() { settle(t, l, g, 9) })
		step("refund", func() { refund(t, l, mustGrant(t, l, 1)) })
		step("charge", func() {
			l.Charge(core.QuotaGrantAt(2, time.Now()))
			available(t, l)
		})
		step("release", func() { require.NoError(t, l.Release(bg, 1)) })
		ok, err := l.Expire(bg, time.Hour)
		require.NoError(t, err)
		assert.True(t, ok)
		ttl, err := e.rdb.PTTL(bg, quotaKey(l)).Result()
		require.NoError(t, err)
		assert.InDelta(t, time.Hour, ttl, float64(time.Second), "Expire sets it")
		step("clear expire", func() {
			ok, err := l.ClearExpire(bg)
			require.NoError(t, err)
			assert.True(t, ok)
		})
		assert.EqualValues(t, 1, e.exists(t, core.Keys(l)...), "one key")

		if !e.virtual() {
			return
		}
		now := redisTime(t, e)
		_, end := core.QuotaBounds(q, now)
		time.Sleep(end.Sub(now) + core.QuotaMargin)
		assert.EqualValues(t, 0, e.exists(t, quotaKey(l)), "gone after its period")
		deleted, err := l.Delete(bg)
		require.NoError(t, err)
		assert.False(t, deleted)
	})
}

// Concurrent acquires never grant past the limit.
func TestQuotaConcurrentAcquires(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithQuota(core.Quota{Limit: 20, Period: core.Day}))
		var granted atomic.Int64
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if res, err := l.TryAcquire(bg, 1); assert.NoError(t, err) && res.Allowed {
					granted.Add(1)
				}
			})
		}
		wg.Wait()
		assert.EqualValues(t, 20, granted.Load())
		assert.EqualValues(t, 0, available(t, l))
	})
}

// A refusal is kept by the local denial cache until the period ends,
// with no round trip; a refund on the same Client drops it.
func TestQuotaDenialCache(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		h := addHook(e)
		q := core.Quota{Limit: 2, Period: core.Day}
		l := e.limiter(t, core.WithQuota(q))
		g := mustGrant(t, l, 2)
		first := assertRetryToBoundary(t, e, l, q, 1)
		calls := h.scripts.Load()
		again, err := l.TryAcquire(bg, 2)
		require.NoError(t, err)
		assert.True(t, again.Cached)
		assert.False(t, again.Allowed)
		assert.Positive(t, again.RetryAfter)
		assert.LessOrEqual(t, again.RetryAfter, first.RetryAfter)
		assert.Equal(t, calls, h.scripts.Load(), "no round trip")
		refund(t, l, g)
		assert.True(t, tryAcquire(t, l, 1), "asked again")
	})
}

// Redis's clock decides the period: when it is in another period than
// this process's clock, the call is sent again in Redis's period; then
// the Client knows Redis's clock.
func TestQuotaPeriodIsRedissClock(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		h := addHook(e)
		q := core.Quota{Limit: 5, Period: core.Day}
		l := e.limiter(t, core.WithQuota(q))
		time.Sleep(12 * time.Hour)
		assert.EqualValues(t, 5, available(t, l)) // the script loaded
		e.mr.SetTime(time.Now().Add(-36 * time.Hour))
		calls := h.scripts.Load()
		res, err := l.TryAcquire(bg, 2)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		assert.Equal(t, calls+2, h.scripts.Load(), "sent in this process's period, then in Redis's")
		now := redisTime(t, e)
		start, end := core.QuotaBounds(q, now)
		assert.Equal(t, end.Sub(now), res.ResetAfter, "Redis's day")
		v, err := e.rdb.Get(bg, quotaKey(l)).Result()
		require.NoError(t, err)
		assert.Regexp(t, "^"+itoa(start.UnixMilli())+":2:", v)
		require.True(t, tryAcquire(t, l, 1))
		assert.Equal(t, calls+3, h.scripts.Load(), "now in Redis's period at once")
	})
}

// On miniredis, whose clock is the test's: periods of every kind by
// Redis's clock, across a day of 23 hours, a leap February and a year's
// end; TryAcquireWithin waits until the next period when it fits.
func TestQuotaPeriodsOnRedissClock(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		newYork := zone(t, "America/New_York")
		for _, step := range []struct {
			at     time.Time // the bubble's clock starts at 2000-01-01 00:00 UTC
			q      core.Quota
			length time.Duration
		}{
			{utc(t, "2000-02-01 00:00"), core.Quota{Limit: 1, Period: core.Month}, 29 * 24 * time.Hour},
			{at(t, newYork, "2000-04-02 00:00"), core.Quota{Limit: 1, Period: core.Day, Location: newYork}, 23 * time.Hour},
			{at(t, newYork, "2000-10-29 00:00"), core.Quota{Limit: 1, Period: core.Day, Location: newYork}, 25 * time.Hour},
			{utc(t, "2000-12-25 00:00"), core.Quota{Limit: 1, Period: core.Week}, 7 * 24 * time.Hour},
		} {
			time.Sleep(time.Until(step.at))
			l := c.Limiter(e.name+step.at.String(), core.WithQuota(step.q))
			require.True(t, tryAcquire(t, l, 1))
			res, err := l.TryAcquire(bg, 1)
			require.NoError(t, err)
			assert.False(t, res.Allowed)
			assert.Equal(t, step.length, res.RetryAfter, "%v: the whole period", step.at)
			assert.Equal(t, step.length, res.Rate.Interval)
			res, err = l.TryAcquireWithin(bg, 1, step.length-time.Millisecond)
			require.NoError(t, err)
			assert.False(t, res.Allowed, "%v: the wait does not fit", step.at)
			res, err = l.TryAcquireWithin(bg, 1, step.length+time.Second)
			require.NoError(t, err)
			assert.True(t, res.Allowed, "%v: granted in the next period", step.at)
			assert.False(t, time.Now().Before(step.at.Add(step.length)), "never early")
		}
	})
}

// What a quota's limiter cannot do is an error before any I/O.
func TestQuotaArguments(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		h := addHook(e)
		c := e.client(t)
		q := core.Quota{Limit: 10, Period: core.Day}
		l := c.Limiter(e.name, core.WithQuota(q))
		_, err := l.TrySetRate(bg, core.PerMinute(1))
		assert.ErrorIs(t, err, core.ErrInvalidOption)
		assert.ErrorIs(t, l.SetRate(bg, core.PerMinute(1)), core.ErrInvalidOption)
		_, err = l.UpdateRate(bg, core.PerMinute(1))
		assert.ErrorIs(t, err, core.ErrInvalidOption)
		_, err = l.Config(bg)
		assert.ErrorIs(t, err, core.ErrInvalidOption)
		_, err = l.TryAcquire(bg, 11)
		assert.ErrorIs(t, err, core.ErrPermitsExceedRate)
		_, err = l.TryAcquire(bg, 0)
		assert.ErrorIs(t, err, core.ErrInvalidPermits)
		_, err = l.Settle(bg, core.QuotaGrantAt(1, time.Now()), -1)
		assert.ErrorIs(t, err, core.ErrInvalidPermits)
		ok, err := l.Refund(bg, core.GrantAt(1, time.Now()))
		assert.NoError(t, err)
		assert.False(t, ok, "a rate's grant")
		both := c.Limiter(e.name, core.WithQuota(q), core.WithRate(core.PerMinute(1)))
		_, err = both.TryAcquire(bg, 1)
		assert.ErrorIs(t, err, core.ErrInvalidOption)
		_, err = c.Limiter(e.name, core.WithQuota(core.Quota{Limit: 1})).TryAcquire(bg, 1)
		assert.ErrorIs(t, err, core.ErrInvalidRate)
		assert.Zero(t, h.scripts.Load(), "no I/O")
		assert.Zero(t, core.Owed(c))
	})
}

// An acquire on a quota that Redis did not decide returns, besides the
// grant it asked for, the quota's Rate and the time until the current
// period ends, by the Client's estimate of Redis's clock; a refusal of
// Redis's (ErrInvalidConfig) the same, without a grant.
func TestQuotaUndecidedKnowsItsPeriod(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		q := core.Quota{Limit: 5, Period: core.Day, Location: zone(t, "Europe/Paris")}
		// 2026-03-28 23:00 in Paris: a day of 23 hours begins in an hour.
		e.mr.SetTime(time.Date(2026, 3, 28, 23, 0, 0, 0, q.Location))
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithQuota(q))
		require.True(t, tryAcquire(t, l, 1), "a decision: the Client measures Redis's clock")
		now := redisTime(t, e)
		_, end := core.QuotaBounds(q, now)

		e.mr.SetError("LOADING Redis is loading")
		res, err := l.TryAcquire(bg, 2)
		require.Error(t, err)
		assert.False(t, res.Allowed)
		assert.False(t, res.Grant == (core.Grant{}), "the grant asked for")
		assert.Equal(t, core.Rate{Permits: 5, Interval: 24 * time.Hour}, res.Rate)
		assert.InDelta(t, end.Sub(now), res.ResetAfter, float64(time.Second), "until the day ends by Redis's clock")

		// Redis answers again (the Client's probe, once a second, finds
		// it); past midnight by its clock, the next day is 23 hours long.
		e.mr.SetError("")
		time.Sleep(2 * time.Second)
		e.mr.SetTime(time.Date(2026, 3, 29, 0, 0, 1, 0, q.Location))
		require.True(t, tryAcquire(t, l, 1))
		require.NoError(t, e.rdb.Del(bg, quotaKey(l)).Err())
		require.NoError(t, e.rdb.HSet(bg, quotaKey(l), "x", "1").Err())
		res, err = l.TryAcquire(bg, 1)
		require.ErrorIs(t, err, core.ErrInvalidConfig)
		assert.True(t, res.Grant == (core.Grant{}), "Redis answered: no grant")
		assert.Equal(t, core.Rate{Permits: 5, Interval: 23 * time.Hour}, res.Rate)
		assert.InDelta(t, 23*time.Hour-time.Second, res.ResetAfter, float64(time.Second))
	})
}
