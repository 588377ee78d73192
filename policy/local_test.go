package policy

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// Random demand on one key: no window of one interval ever holds more than
// the rate, each denial's retry time is never early, and when a request is
// denied the window is, on average, mostly full (the window counts up to
// 1/16 of an interval more than its length).
func TestFallbackNeverGrantsMoreThanTheRate(t *testing.T) {
	for _, r := range []core.Rate{
		{Permits: 3, Interval: time.Second},
		{Permits: 10, Interval: 100 * time.Millisecond},
		{Permits: 1000, Interval: time.Minute},
	} {
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, seed))
		l := newLocalLimiter(10)
		now := time.Unix(1_700_000_000, 0)
		var grants, denials []time.Time
		retryAt := map[int64]time.Time{} // permits -> earliest time a retry may succeed
		for range 20_000 {
			now = now.Add(time.Duration(rng.Int64N(int64(r.Interval) / (4 * r.Permits))))
			n := 1 + rng.Int64N(min(3, r.Permits))
			res := l.Take("k", r, n, now)
			if res.Allowed {
				if at, ok := retryAt[n]; ok {
					assert.False(t, now.Before(at), "%v seed %d: granted before the retry time", r, seed)
				}
				for range n {
					grants = append(grants, now)
				}
				clear(retryAt)
				continue
			}
			require.Positive(t, res.RetryAfter)
			require.LessOrEqual(t, res.RetryAfter, r.Interval, "%v seed %d: a wait longer than the window", r, seed)
			require.LessOrEqual(t, res.ResetAfter, r.Interval, "%v seed %d", r, seed)
			denials = append(denials, now)
			if _, ok := retryAt[n]; !ok {
				retryAt[n] = now.Add(res.RetryAfter)
			}
		}
		// Every window ending at a grant holds at most the rate.
		first := 0
		for i, g := range grants {
			for !grants[first].After(g.Add(-r.Interval)) {
				first++
			}
			in := i - first + 1
			require.LessOrEqual(t, int64(in), r.Permits, "%v seed %d: %d grants in a window", r, seed, in)
		}
		// How full the window was at each denial.
		full, lo, hi := 0.0, 0, 0 // grants[lo:hi] are in the window ending at d
		for _, d := range denials {
			for hi < len(grants) && !grants[hi].After(d) {
				hi++
			}
			for lo < hi && !grants[lo].After(d.Add(-r.Interval)) {
				lo++
			}
			full += float64(hi-lo) / float64(r.Permits)
		}
		require.NotEmpty(t, denials)
		t.Logf("%v: window %.1f%% full at a denial, on average", r, 100*full/float64(len(denials)))
		assert.Greater(t, full/float64(len(denials)), 0.8, "%v: the window is mostly full when a request is denied", r)
	}
}

// A denied request that waits exactly its RetryAfter is granted.
func TestFallbackRetryAfterIsNeverEarly(t *testing.T) {
	l := newLocalLimiter(10)
	rate := core.Rate{Permits: 2, Interval: time.Second}
	now := time.Unix(1_700_000_000, 123_456_789)
	require.True(t, l.Take("k", rate, 2, now).Allowed)
	now = now.Add(300 * time.Millisecond)
	r := l.Take("k", rate, 1, now)
	require.False(t, r.Allowed)
	assert.Equal(t, 700*time.Millisecond, r.RetryAfter, "the grants leave the window then")
	assert.False(t, l.Take("k", rate, 1, now.Add(r.RetryAfter-time.Nanosecond)).Allowed, "not before")
	assert.True(t, l.Take("k", rate, 1, now.Add(r.RetryAfter)).Allowed)
}

// A call decided late (a lost call's, decided under its own grant's time)
// is decided as at its time: the grants in its window count, also those
// that a later request found out of its own window.
func TestFallbackDecidesLateCallsAsAtTheirTime(t *testing.T) {
	l := newLocalLimiter(10)
	rate := core.Rate{Permits: 2, Interval: time.Second}
	t0 := time.Unix(1_700_000_000, 0)
	require.True(t, l.Take("k", rate, 2, t0).Allowed)
	require.True(t, l.Take("k", rate, 1, t0.Add(time.Second)).Allowed, "the first two left the window")
	late := l.Take("k", rate, 1, t0.Add(900*time.Millisecond))
	assert.False(t, late.Allowed, "its window holds the first two")
	assert.Equal(t, 100*time.Millisecond, late.RetryAfter)
}

// A cost above the process's share of the rate, during an outage, is
// granted alone in an empty window, and keeps it closed until it leaves the
// window; a request refused meanwhile is told when that is, and is granted
// then: no Retry-After that cannot come true.
func TestFallbackCostAboveTheShare(t *testing.T) {
	l := newLocalLimiter(10)
	share := core.Rate{Permits: 5, Interval: time.Second}
	now := time.Unix(1_700_000_000, 0)
	big := l.Take("k", share, 8, now)
	require.True(t, big.Allowed, "alone in an empty window")
	assert.Zero(t, big.Remaining)
	r := l.Take("k", share, 8, now.Add(100*time.Millisecond))
	require.False(t, r.Allowed)
	assert.LessOrEqual(t, r.RetryAfter, time.Second+time.Second/16)
	assert.False(t, l.Take("k", share, 1, now.Add(100*time.Millisecond)).Allowed, "the window stays closed")
	assert.True(t, l.Take("k", share, 8, now.Add(100*time.Millisecond).Add(r.RetryAfter)).Allowed, "granted when told")
}

// A flood of distinct keys keeps at most maxKeys of them, in bounded memory.
func TestFallbackKeysAreBounded(t *testing.T) {
	const maxKeys = 10_000
	l := newLocalLimiter(maxKeys)
	rate := core.Rate{Permits: 5, Interval: time.Second}
	before := liveHeap()
	now := time.Unix(1_700_000_000, 0)
	for i := range 100_000 {
		l.Take("client:"+strconv.Itoa(i), rate, 1, now)
	}
	assert.LessOrEqual(t, l.Len(), maxKeys)
	grew := liveHeap() - before
	t.Logf("%d keys kept, live heap +%d bytes (%d per key)", l.Len(), grew, grew/int64(l.Len()))
	assert.Less(t, grew, int64(maxKeys*localBytesPerKey))
	runtime.KeepAlive(l)
}

// The least recently used key goes first.
func TestFallbackDropsTheLeastRecentlyUsedKey(t *testing.T) {
	l := newLocalLimiter(16) // one key per shard
	rate := core.Rate{Permits: 1, Interval: time.Hour}
	now := time.Unix(1_700_000_000, 0)
	require.True(t, l.Take("a", rate, 1, now).Allowed)
	require.False(t, l.Take("a", rate, 1, now).Allowed)
	for i := range 1000 { // evicts "a" from its shard
		l.Take("flood"+strconv.Itoa(i), rate, 1, now)
	}
	assert.True(t, l.Take("a", rate, 1, now).Allowed, "a forgotten key starts over")
	assert.LessOrEqual(t, l.Len(), 16)
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// The fallback decides a grant as at the time of its call, which is when
// Limiter.Charge writes it into Redis's log: two calls made within one
// interval get one grant between them, however late the second is decided
// (a busy process decides a call that got no answer long after it).
func TestFallbackDecidesAtTheCallsTime(t *testing.T) {
	c, err := core.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	require.NoError(t, err)
	r := core.Rate{Permits: 1, Interval: 200 * time.Millisecond}
	l := c.Limiter("k", core.WithRate(r))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no call is sent: each Result holds its call's grant
	first, err := l.TryAcquire(ctx, 1)
	require.Error(t, err)
	second, err := l.TryAcquire(ctx, 1)
	require.Error(t, err)
	require.Less(t, second.Grant.Time().Sub(first.Grant.Time()), r.Interval)

	f := newFallback(10)
	assert.True(t, f.take("k", r, 1, first.Grant).Allowed)
	time.Sleep(r.Interval + r.Interval/4) // the second is decided a window later
	assert.False(t, f.take("k", r, 1, second.Grant).Allowed,
		"the log would hold both grants in one window")
	assert.True(t, f.take("k", r, 1, core.Grant{}).Allowed, "without a grant, as at now")
}
