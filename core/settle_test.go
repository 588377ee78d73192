package core_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// grantOf takes permits and returns the grant.
func grantOf(t *testing.T, l *core.Limiter, permits int64) core.Grant {
	t.Helper()
	res, err := l.TryAcquire(bg, permits)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	return res.Grant
}

func settle(t *testing.T, l *core.Limiter, g core.Grant, permits int64) bool {
	t.Helper()
	ok, err := l.Settle(bg, g, permits)
	require.NoError(t, err)
	return ok
}

// A grant settles to its real cost, once: below gives the difference back,
// equal changes nothing, above charges the difference past the rate (a debt
// that denies, with 0 remaining and the exact retry, until the grant leaves
// the window), zero gives it all back; a second settle, or one after the
// grant left the window, changes nothing.
func TestSettleChargesTheRealCost(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 10_000, time.Minute)))

		below := grantOf(t, l, 1000)
		assert.True(t, settle(t, l, below, 100), "below")
		assert.EqualValues(t, 9_900, available(t, l))
		assert.False(t, settle(t, l, below, 5000), "once: a second settle changes nothing")
		assert.EqualValues(t, 9_900, available(t, l))

		equal := grantOf(t, l, 400)
		assert.True(t, settle(t, l, equal, 400), "equal")
		assert.EqualValues(t, 9_500, available(t, l))

		zero := grantOf(t, l, 500)
		assert.True(t, settle(t, l, zero, 0), "zero: all of it back")
		assert.EqualValues(t, 9_500, available(t, l))
		refunded, err := l.Refund(bg, zero)
		require.NoError(t, err)
		assert.False(t, refunded, "a settled grant is not refunded again")

		start := time.Now()
		above := grantOf(t, l, 1000)
		assert.True(t, settle(t, l, above, 12_000), "above: past the rate")
		assert.EqualValues(t, 0, available(t, l), "never negative")
		// Refused until the settled grant, the latest, leaves the window.
		deniedUntilLeaves(t, e, l, -1, time.Minute)
		assert.Empty(t, keysWithoutTTL(t, e, l))

		if !e.virtual() {
			return
		}
		time.Sleep(time.Until(start.Add(time.Minute)))
		assert.False(t, settle(t, l, below, 1), "after its window: nothing")
		assert.True(t, tryAcquire(t, l, 1), "the debt is paid")
	})
}

// Settles racing acquires: the log's sum and the counter agree at the end,
// and every key keeps a TTL.
func TestSettlesRacingAcquiresKeepTheCounterRight(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		r := rate(core.Overall, 1_000_000, time.Minute)
		l := c.Limiter(e.name, core.WithRate(r))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var total int64
		for i := range 64 {
			wg.Go(func() {
				res, err := l.TryAcquire(bg, 100)
				if !assert.NoError(t, err) || !assert.True(t, res.Allowed) {
					return
				}
				real := int64(i * 37 % 250) // below, equal or above the 100 reserved
				ok, err := l.Settle(bg, res.Grant, real)
				if assert.NoError(t, err) && assert.True(t, ok) {
					mu.Lock()
					total += real
					mu.Unlock()
				}
			})
			wg.Go(func() {
				if res, err := l.TryAcquire(bg, 1); assert.NoError(t, err) && assert.True(t, res.Allowed) {
					mu.Lock()
					total++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		assert.Equal(t, r.Permits-total, available(t, l), "the log holds every settled cost and acquire")
		v, err := e.rdb.Get(bg, core.Keys(l)[1]).Int64()
		require.NoError(t, err)
		assert.Equal(t, r.Permits-total, v, "the counter agrees with the log")
		assert.Empty(t, keysWithoutTTL(t, e, l))
	})
}
