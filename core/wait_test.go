package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// In the bubble, time passes only while every goroutine sleeps, so
// "returns at once" and "waits exactly" are checked exactly.

func TestTryAcquireWithinWaitsExactly(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 2, time.Second)))
		require.True(t, tryAcquire(t, l, 2))
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		r, err := l.TryAcquireWithin(bg, 1, 800*time.Millisecond)
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		waited := time.Since(start)
		assert.GreaterOrEqual(t, waited, 700*time.Millisecond, "the exact retry time")
		assert.Less(t, waited, 700*time.Millisecond+5*time.Millisecond, "plus at most 5 ms of jitter")
	})
}

func TestTryAcquireWithinRespectsDeadlines(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 1, 5*time.Second)))
		require.True(t, tryAcquire(t, l, 1))
		for _, c := range []struct {
			name    string
			maxWait time.Duration
			ctx     time.Duration
		}{
			{"maxWait shorter than the retry", 4 * time.Second, time.Hour},
			{"ctx deadline shorter than the retry", time.Hour, 4 * time.Second},
			{"negative maxWait", -time.Second, time.Hour},
		} {
			ctx, cancel := context.WithTimeout(bg, c.ctx)
			start := time.Now()
			r, err := l.TryAcquireWithin(ctx, 1, c.maxWait)
			cancel()
			require.NoError(t, err, c.name)
			assert.False(t, r.Allowed, c.name)
			assert.Zero(t, time.Since(start), "%s: returned at once", c.name)
		}
	})
}

func TestWaitsEndWhenContextIsCancelled(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 1, 5*time.Second)))
		require.True(t, tryAcquire(t, l, 1))

		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		_, err := l.TryAcquireWithin(ctx, 1, time.Hour)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, time.Second, time.Since(start), "ended when cancelled, not at the retry")

		ctx, cancel = context.WithCancel(bg)
		time.AfterFunc(time.Second, cancel)
		start = time.Now()
		require.ErrorIs(t, l.Acquire(ctx, 1), context.Canceled)
		assert.Equal(t, time.Second, time.Since(start))
	})
}

func TestAcquireGivesUpBeforeADeadlineItCannotMeet(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 1, 5*time.Second)))
		require.True(t, tryAcquire(t, l, 1))
		ctx, cancel := context.WithTimeout(bg, 4*time.Second)
		defer cancel()
		start := time.Now()
		err := l.Acquire(ctx, 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Zero(t, time.Since(start), "returned at once")

		ctx, cancel = context.WithTimeout(bg, 6*time.Second)
		defer cancel()
		require.NoError(t, l.Acquire(ctx, 1), "the permit comes back before this deadline")
	})
}

// WithCallTimeout bounds each round trip but not the waits between them.
func TestCallTimeout(t *testing.T) {
	_, err := e2eClient(t).Limiter("x", core.WithCallTimeout(-time.Second)).TryAcquire(bg, 1)
	require.ErrorIs(t, err, core.ErrInvalidOption)

	runMini(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 1, time.Second)), core.WithCallTimeout(50*time.Millisecond))
		require.True(t, tryAcquire(t, l, 1))
		start := time.Now()
		r, err := l.TryAcquireWithin(bg, 1, 2*time.Second)
		require.NoError(t, err, "a one-second wait is not a round trip")
		assert.True(t, r.Allowed)
		assert.GreaterOrEqual(t, time.Since(start), time.Second)
	})
	runRedis(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 1, time.Second)), core.WithCallTimeout(time.Nanosecond))
		_, err := l.TryAcquire(bg, 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func e2eClient(t *testing.T) *core.Client {
	rdb, _ := deadRedis(t)
	c, err := core.New(rdb)
	require.NoError(t, err)
	return c
}
