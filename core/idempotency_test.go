package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// hook counts script calls and, when resend is on, sends each one twice
// with the same arguments: the first reply is "lost", as when a response
// times out and the client retries.
type hook struct {
	scripts atomic.Int64
	resend  atomic.Bool
}

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.scripts.Add(1)
			if h.resend.Load() {
				if err := next(ctx, cmd); err != nil {
					return err
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func addHook(e *env) *hook {
	h := &hook{}
	e.rdb.AddHook(h)
	return h
}

// A resent acquire finds its own log member and does not consume again.
func TestAcquireIsIdempotent(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		h := addHook(e)
		l := e.limiter(t, core.WithRate(rate(core.Overall, 3, time.Minute)))
		h.resend.Store(true)
		for want := int64(2); want >= 0; want-- {
			r, err := l.TryAcquire(bg, 1)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			assert.Equal(t, want, r.Remaining, "each call consumed once although sent twice")
		}
		h.resend.Store(false)
		assert.EqualValues(t, 0, available(t, l))
		assert.False(t, tryAcquire(t, l, 1))
		n, err := e.rdb.ZCard(bg, core.Keys(l)[3]).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 3, n)
	})
}

func TestDenialCache(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		h := addHook(e)
		c := e.client(t)
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 2, time.Second)))
		require.True(t, tryAcquire(t, l, 2))
		first, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		require.False(t, first.Allowed)
		calls := h.scripts.Load()

		for i := 0; i < 100; i++ {
			r, err := c.Limiter(e.name, core.WithRate(rate(core.Overall, 2, time.Second))).TryAcquire(bg, 1)
			require.NoError(t, err)
			require.False(t, r.Allowed)
			require.Greater(t, r.RetryAfter, time.Duration(0))
			require.LessOrEqual(t, r.RetryAfter, first.RetryAfter)
		}
		assert.Equal(t, calls, h.scripts.Load(), "denied from memory: no Redis call")
		assert.EqualValues(t, 1, core.CachedDenials(c))

		more, err := l.TryAcquire(bg, 2)
		require.NoError(t, err)
		assert.Equal(t, calls, h.scripts.Load(), "more permits are denied from memory too")
		assert.True(t, more.Cached)
		assert.GreaterOrEqual(t, more.RetryAfter, first.RetryAfter-50*time.Millisecond, "told to wait until every permit is back: never early")

		other, err := c.Limiter(e.name, core.WithRate(rate(core.Overall, 3, time.Second))).TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.Equal(t, calls+1, h.scripts.Load(), "another rate asks Redis")
		assert.False(t, other.Cached)
		assert.True(t, other.Allowed, "3 per second, 2 out")

		time.Sleep(first.RetryAfter)
		assert.True(t, tryAcquire(t, l, 1), "at the exact retry time Redis is asked and grants")
	})
}

func TestDenialCacheDroppedByOwnChanges(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t)
		l := c.Limiter(e.name)
		require.True(t, trySetRate(t, l, rate(core.Overall, 1, time.Minute)))
		for _, change := range []func() error{
			func() error { return l.Release(bg, 1) },
			func() error { return l.SetRate(bg, rate(core.Overall, 1, time.Minute)) },
			func() error { _, err := l.UpdateRate(bg, rate(core.Overall, 2, time.Minute)); return err },
			func() error {
				if _, err := l.Delete(bg); err != nil {
					return err
				}
				return errOf(l.TrySetRate(bg, rate(core.Overall, 1, time.Minute)))
			},
		} {
			require.NoError(t, l.SetRate(bg, rate(core.Overall, 1, time.Minute)))
			require.True(t, tryAcquire(t, l, 1))
			require.False(t, tryAcquire(t, l, 1))
			require.EqualValues(t, 1, core.CachedDenials(c))
			require.NoError(t, change())
			assert.Zero(t, core.CachedDenials(c))
			assert.True(t, tryAcquire(t, l, 1))
		}
	})
}

func TestDenialCacheOff(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		h := addHook(e)
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 1, time.Minute)))
		require.True(t, tryAcquire(t, l, 1))
		before := h.scripts.Load()
		for i := 0; i < 5; i++ {
			require.False(t, tryAcquire(t, l, 1))
		}
		assert.Equal(t, before+5, h.scripts.Load())
		assert.Zero(t, core.CachedDenials(c))
	})
}

// The cache keeps at most its capacity of limiters, the least recently
// used going first, and an expired entry goes when it is next read.
func TestDenialCacheIsBounded(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(64))
		r := rate(core.Overall, 1, 100*time.Millisecond)
		for i := 0; i < 500; i++ {
			l := c.Limiter("a"+itoa(int64(i)), core.WithRate(r))
			require.True(t, tryAcquire(t, l, 1))
			require.False(t, tryAcquire(t, l, 1))
		}
		assert.LessOrEqual(t, core.DenialCacheLen(c), 64)
		assert.Greater(t, core.DenialCacheLen(c), 0)
	})
}

// A Result says whether the denial cache answered.
func TestResultSaysWhoAnswered(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 1, time.Minute)))
		r, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		assert.False(t, r.Cached)
		r, err = l.TryAcquire(bg, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		assert.False(t, r.Cached, "Redis denied it")
		cached, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.False(t, cached.Allowed)
		assert.True(t, cached.Cached, "the cache denied it again")
		assert.InDelta(t, float64(r.RetryAfter), float64(cached.RetryAfter), float64(50*time.Millisecond))
	})
}
