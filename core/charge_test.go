package core_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// Grants made without Redis go into the log at their own times, past the
// rate if need be: the window counts them, whatever Redis granted
// meanwhile. A window over its rate is a debt: acquires are denied, with 0
// remaining and the exact retry time, until enough of it leaves the window.
// A grant already in the log, or whose window passed, changes nothing.
func TestChargeCountsGrantsAtTheirTimes(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(false))
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 10, 10*time.Second)))
		for range 4 {
			require.True(t, tryAcquire(t, l, 1))
		}
		start := time.Now()
		early, late := core.GrantAt(6, start.Add(-2*time.Second)), core.GrantAt(6, start.Add(-time.Second))
		n, err := l.Charge(bg, early, late)
		require.NoError(t, err)
		assert.Equal(t, 2, n, "both written, past the rate: 16 permits in a window of 10")
		n, err = l.Charge(bg, early, late)
		require.NoError(t, err)
		assert.Zero(t, n, "a resend writes nothing")
		n, err = l.Charge(bg, core.GrantAt(1, start.Add(-11*time.Second)), core.Grant{})
		require.NoError(t, err)
		assert.Zero(t, n, "a grant whose window passed, and a zero grant, change nothing")
		assert.Empty(t, keysWithoutTTL(t, e, l), "every key keeps a TTL")

		// In debt: denied until the late charge leaves the window (the early
		// one leaving still leaves 10 out), with 0 remaining.
		assert.EqualValues(t, 0, available(t, l))
		// The late charge is fifth from the end of the log: the 4 grants of
		// Redis came after it.
		res := deniedUntilLeaves(t, e, l, -5, 10*time.Second)
		// The late charge, at its time: Redis's clock is the local one,
		// within the round trips it is measured by.
		assert.InDelta(t, time.Until(start.Add(9*time.Second)), res.RetryAfter, float64(500*time.Millisecond))
		if !e.virtual() {
			return
		}
		time.Sleep(res.RetryAfter)
		assert.True(t, tryAcquire(t, l, 1), "the debt is paid")
		assert.EqualValues(t, 5, available(t, l), "the 4 of Redis and this one are out")
	})
}

// A Redisson client sharing a limiter in debt is denied until the debt is
// paid, and reads its available permits as negative.
func TestRedissonSeesADebt(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		java := newJavaClient(t, e.rdb)
		l := e.client(t).Limiter(e.name, core.WithRate(rate(core.Overall, 10, 10*time.Second)))
		require.True(t, tryAcquire(t, l, 2))
		n, err := l.Charge(bg, core.GrantAt(12, time.Now()))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		assert.EqualValues(t, -4, java.availablePermits(e.name), "10 - 14")
		ok, hint := java.tryAcquire(e.name, 1)
		assert.False(t, ok, "denied")
		assert.Positive(t, hint)
		assert.EqualValues(t, 0, available(t, l), "never negative here")
	})
}

// deniedUntilLeaves asks l for a permit, which must be refused with 0
// remaining, and checks its retry by the times Redis recorded: exactly when
// the grant of l's log (of an Overall rate) at rank (by time, as ZRANGE
// counts: -1 the latest) leaves the window, as Redis's clock read before
// and after the call bounds that.
func deniedUntilLeaves(t *testing.T, e *env, l *core.Limiter, rank int64, interval time.Duration) core.Result {
	t.Helper()
	grant, err := e.rdb.ZRangeWithScores(bg, core.Keys(l)[3], rank, rank).Result()
	require.NoError(t, err)
	require.Len(t, grant, 1)
	leaves := time.UnixMilli(int64(grant[0].Score)).Add(interval)
	before, err := e.rdb.Time(bg).Result()
	require.NoError(t, err)
	res, err := l.TryAcquire(bg, 1)
	require.NoError(t, err)
	after, err := e.rdb.Time(bg).Result()
	require.NoError(t, err)
	assert.False(t, res.Allowed, "in debt, even 1 is refused")
	assert.Zero(t, res.Remaining)
	// Redis reads its clock in whole milliseconds.
	assert.GreaterOrEqual(t, res.RetryAfter, leaves.Sub(after)-time.Millisecond, "exact: when that grant leaves the window")
	assert.LessOrEqual(t, res.RetryAfter, leaves.Sub(before)+time.Millisecond, "exact: when that grant leaves the window")
	return res
}
