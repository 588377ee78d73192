package core_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// Peek says what the next TryAcquire gets, taking nothing: allowed with
// the permits left, or refused with the retry time that TryAcquire gives.
func TestPeekMatchesTheNextAcquire(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		r := rate(core.Overall, 3, time.Minute)
		l := e.client(t, core.WithDenialCache(0)).Limiter(e.name, core.WithRate(r))
		p, err := l.Peek(bg, 1)
		require.NoError(t, err)
		assert.True(t, p.Allowed, "a limiter never used is full")
		assert.EqualValues(t, 3, p.Remaining)
		assert.Zero(t, p.RetryAfter)
		for range 3 {
			p, err := l.Peek(bg, 1)
			require.NoError(t, err)
			got, err := l.TryAcquire(bg, 1)
			require.NoError(t, err)
			assert.True(t, p.Allowed && got.Allowed)
			assert.Equal(t, p.Remaining-1, got.Remaining, "the permits left before the grant")
			assert.Equal(t, got.Rate, p.Rate)
			if e.virtual() {
				time.Sleep(10 * time.Second)
			}
		}
		p, err = l.Peek(bg, 1)
		require.NoError(t, err)
		got, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.False(t, p.Allowed)
		assert.False(t, got.Allowed)
		assert.Zero(t, p.Remaining)
		assert.InDelta(t, got.RetryAfter, p.RetryAfter, float64(50*time.Millisecond), "the retry time TryAcquire gives")
		assert.InDelta(t, got.ResetAfter, p.ResetAfter, float64(50*time.Millisecond))
		if e.virtual() {
			assert.Equal(t, 30*time.Second, p.RetryAfter, "the first grant, 30 s old, leaves the window in 30 s")
		}
		p, err = l.Peek(bg, 2)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, p.RetryAfter+50*time.Millisecond, got.RetryAfter, "more permits come back no sooner")
		_, err = l.Peek(bg, 4)
		assert.ErrorIs(t, err, core.ErrPermitsExceedRate)
		_, err = l.Peek(bg, 0)
		assert.ErrorIs(t, err, core.ErrInvalidPermits)
		avail, err := l.AvailablePermits(bg)
		require.NoError(t, err)
		assert.Zero(t, avail, "peeks took nothing, and the refusal neither")
	})
}

// Peek on a quota: the count left in the period, and the time to its end.
func TestPeekAQuota(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithQuota(core.Quota{Limit: 2, Period: core.Day}))
		for i := range 2 {
			p, err := l.Peek(bg, 1)
			require.NoError(t, err)
			assert.True(t, p.Allowed)
			assert.EqualValues(t, 2-i, p.Remaining)
			tryAcquire(t, l, 1)
		}
		p, err := l.Peek(bg, 1)
		require.NoError(t, err)
		assert.False(t, p.Allowed)
		got, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.InDelta(t, got.RetryAfter, p.RetryAfter, float64(time.Second), "until midnight UTC")
		assert.EqualValues(t, 2, p.Rate.Permits)
	})
}

// A semaphore's Delete frees every permit.
func TestSemaphoreDelete(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(2))
		semAcquire(t, s, 2, time.Minute)
		assert.Zero(t, semAvailable(t, s))
		ok, err := s.Delete(bg)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.EqualValues(t, 2, semAvailable(t, s))
		assert.Zero(t, e.exists(t, core.SemaphoreKeys(s)...))
		ok, err = s.Delete(bg)
		require.NoError(t, err)
		assert.False(t, ok, "nothing left to delete")
	})
}

// Names lists every limiter, quota and semaphore under a prefix, once,
// whatever the characters of their names, and nothing else.
func TestNames(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		for _, prefix := range []string{"", "svc{a}:"} {
			c := e.client(t, core.WithKeyPrefix(prefix))
			base := e.name + ":"
			want := []string{base + "a", base + "b:c", base + "with space", base + "sem", base + "quota", base + "per*client?"}
			tryAcquire(t, c.Limiter(want[0], core.WithRate(core.PerMinute(5))), 1)
			tryAcquire(t, c.Limiter(want[1], core.WithRate(core.PerMinute(5))), 1)
			tryAcquire(t, c.Limiter(want[2], core.WithRate(core.PerMinute(5))), 1)
			semAcquire(t, c.Semaphore(want[3], core.WithPermits(2)), 1, time.Minute)
			tryAcquire(t, c.Limiter(want[4], core.WithQuota(core.Quota{Limit: 5, Period: core.Day})), 1)
			tryAcquire(t, c.Limiter(want[5], core.WithRate(core.Rate{Permits: 5, Interval: time.Minute, Type: core.PerClient})), 1)
			// Not under the prefix asked for.
			tryAcquire(t, c.Limiter(e.name+"-other", core.WithRate(core.PerMinute(5))), 1)
			var got []string
			for n, err := range c.Names(bg, base) {
				require.NoError(t, err)
				got = append(got, n)
			}
			slices.Sort(want)
			slices.Sort(got)
			assert.Equal(t, want, got, "prefix %q", prefix)
		}
	})
}

// A denial this Client keeps in memory lasts a second at most: a limiter
// another Client deleted (a reset) grants here within a second.
func TestACachedDenialLastsASecond(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		r := core.WithRate(rate(core.Overall, 1, time.Minute))
		here, there := e.client(t).Limiter(e.name, r), e.client(t).Limiter(e.name, r)
		tryAcquire(t, here, 1)
		got, err := here.TryAcquire(bg, 1)
		require.NoError(t, err)
		require.False(t, got.Allowed)
		deleted := time.Now()
		_, err = there.Delete(bg)
		require.NoError(t, err)
		if e.virtual() {
			got, err = here.TryAcquire(bg, 1)
			require.NoError(t, err)
			assert.True(t, got.Cached, "still denied from memory")
			time.Sleep(time.Second)
			assert.True(t, tryAcquire(t, here, 1), "a second later, Redis decides")
			return
		}
		require.Eventually(t, func() bool {
			got, err := here.TryAcquire(bg, 1)
			return err == nil && got.Allowed
		}, 3*time.Second, 10*time.Millisecond)
		t.Logf("granted here %v after the delete there", time.Since(deleted).Round(time.Millisecond))
	})
}
