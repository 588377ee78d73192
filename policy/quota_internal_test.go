package policy

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// quotaBytesPerKey bounds the memory one key takes in a quota's fallback:
// its share, its name, its map entry and its place in the recency list
// (TestQuotaSharesAreBounded observed 119 bytes).
const quotaBytesPerKey = 256

// A key's share is what Redis last left of its period divided by the
// instances, rounded up, until the period's end; then, or for a key never
// decided, a share of the whole limit, from which one request of any cost
// may be granted alone.
func TestQuotaShares(t *testing.T) {
	qs := newQuotaShares(100)
	now := time.Unix(1_700_000_000, 0)
	day := core.Rate{Permits: 10, Interval: 24 * time.Hour}
	// Redis left 7 of the day, which ends in an hour; 3 instances.
	qs.note("k", core.Result{Allowed: true, Remaining: 7, ResetAfter: time.Hour, Rate: day}, 3, now)
	asked := core.Result{Rate: day, ResetAfter: time.Hour}
	for want := int64(2); want >= 0; want-- {
		r := qs.take("k", 10, 3, 1, asked, now)
		require.True(t, r.Allowed)
		assert.Equal(t, want, r.Remaining)
		assert.Equal(t, time.Hour, r.ResetAfter)
		assert.Equal(t, day, r.Rate)
	}
	r := qs.take("k", 10, 3, 1, asked, now.Add(time.Minute))
	assert.False(t, r.Allowed, "ceil(7 / 3) granted")
	assert.Equal(t, 59*time.Minute, r.RetryAfter, "until the period's end")

	// The period ends: a share of the next one's whole limit, until its
	// end, which the failed call gave.
	next := core.Result{Rate: core.Rate{Permits: 10, Interval: 23 * time.Hour}, ResetAfter: 23 * time.Hour}
	r = qs.take("k", 10, 3, 9, next, now.Add(time.Hour))
	assert.True(t, r.Allowed, "a cost above the share of 4, granted alone from a whole share")
	assert.Zero(t, r.Remaining)
	assert.Equal(t, 23*time.Hour, r.Rate.Interval)
	assert.False(t, qs.take("k", 10, 3, 1, next, now.Add(time.Hour)).Allowed)

	// A key never decided, and one Redis left nothing: in debt.
	for range 4 {
		assert.True(t, qs.take("new", 10, 3, 1, asked, now).Allowed)
	}
	assert.False(t, qs.take("new", 10, 3, 1, asked, now).Allowed)
	qs.note("debt", core.Result{Remaining: 0, ResetAfter: time.Hour, Rate: day}, 3, now)
	r = qs.take("debt", 10, 3, 1, asked, now)
	assert.False(t, r.Allowed)
	assert.Equal(t, time.Hour, r.RetryAfter)
	// Redis had counted nothing: the share is whole.
	qs.note("fresh", core.Result{Allowed: true, Remaining: 10, ResetAfter: time.Hour, Rate: day}, 3, now)
	assert.True(t, qs.take("fresh", 10, 3, 10, asked, now).Allowed)
}

// A quota's fallback keeps its keys in bounded memory, the least recently
// used going first.
func TestQuotaSharesAreBounded(t *testing.T) {
	const maxKeys = 10_000
	qs := newQuotaShares(maxKeys)
	day := core.Rate{Permits: 5, Interval: 24 * time.Hour}
	now := time.Unix(1_700_000_000, 0)
	before := liveHeap()
	for i := range 100_000 {
		qs.note("client:"+strconv.Itoa(i), core.Result{Allowed: true, Remaining: 4, ResetAfter: time.Hour, Rate: day}, 1, now)
	}
	n := qs.keys.Len()
	assert.LessOrEqual(t, n, maxKeys)
	grew := liveHeap() - before
	t.Logf("%d keys kept, live heap +%d bytes (%d per key)", n, grew, grew/int64(n))
	assert.Less(t, grew, int64(maxKeys*quotaBytesPerKey))
	runtime.KeepAlive(qs)
}
