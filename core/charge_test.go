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
		res, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed)
		assert.Zero(t, res.Remaining)
		wait := time.Until(start.Add(9 * time.Second))
		assert.LessOrEqual(t, res.RetryAfter, wait+time.Millisecond, "exact: when the late charge leaves the window")
		assert.Greater(t, res.RetryAfter, wait-500*time.Millisecond)
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
