package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 10, 10*time.Second)))
		for range 4 {
			require.True(t, tryAcquire(t, l, 1))
		}
		start := time.Now()
		early, late := core.GrantAt(6, start.Add(-2*time.Second)), core.GrantAt(6, start.Add(-time.Second))
		logLen := func() int64 {
			n, err := e.rdb.ZCard(bg, core.Keys(l)[3]).Result()
			require.NoError(t, err)
			return n
		}
		l.Charge(early, late)
		assert.EqualValues(t, 2, core.Owed(c), "kept until the limiter's next call")
		assert.EqualValues(t, 0, available(t, l), "in debt: 16 permits in a window of 10")
		assert.Zero(t, core.Owed(c), "paid with that call")
		assert.EqualValues(t, 6, logLen(), "both written, past the rate")
		l.Charge(early, late)
		l.Charge(core.GrantAt(1, start.Add(-11*time.Second)), core.Grant{})
		assert.EqualValues(t, 0, available(t, l))
		assert.EqualValues(t, 6, logLen(), "a resend, a grant whose window passed and a zero grant change nothing")
		assert.Empty(t, keysWithoutTTL(t, e, l), "every key keeps a TTL")

		// In debt: denied until the late charge leaves the window (the early
		// one leaving still leaves 10 out), with 0 remaining.
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

// A grant made without Redis whose acquire's script ran late, after it
// (Redis stopped and resumed while the call waited), is in the log at the
// script's time: its charge moves it back to its own time, so that it
// counts once, when it was made, and not as if made later. A grant whose
// script ran before its time stays where it is.
func TestAChargeMovesALateScriptsGrantToItsTime(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		r := rate(core.Overall, 10, 10*time.Second)
		l := c.Limiter(e.name, core.WithRate(r))
		require.True(t, tryAcquire(t, l, 1))
		keys := core.Keys(l)
		now, err := e.rdb.Time(bg).Result()
		require.NoError(t, err)
		made, early := core.GrantAt(1, time.Now().Add(-3*time.Second)), core.GrantAt(1, time.Now().Add(time.Second))
		for _, g := range []core.Grant{made, early} { // their scripts, run now
			require.NoError(t, e.rdb.ZAdd(bg, keys[3], redis.Z{Score: float64(now.UnixMilli()), Member: core.MemberOf(g)}).Err())
			require.NoError(t, e.rdb.DecrBy(bg, keys[1], 1).Err())
		}
		l.Charge(made, early)
		assert.EqualValues(t, 7, available(t, l), "each counted once")
		score := func(g core.Grant) time.Time {
			s, err := e.rdb.ZScore(bg, keys[3], core.MemberOf(g)).Result()
			require.NoError(t, err)
			return time.UnixMilli(int64(s))
		}
		assert.WithinDuration(t, now.Add(-3*time.Second), score(made), 500*time.Millisecond, "moved back to its time")
		assert.Equal(t, now.UnixMilli(), score(early).UnixMilli(), "left where its script put it")
		assert.Empty(t, keysWithoutTTL(t, e, l), "every key keeps a TTL")
	})
}

// A grant that Redis did not decide is written at its Time, the time its
// acquire was made by Redis's clock as the Client measured it then: a
// caller that grants it by other means decides at that time, so a new
// measure of the clock before the charge is paid moves nothing. (A busy
// process measures the clock up to tens of ms apart from one call to the
// next; two local grants an interval apart by their Times were once
// written closer than that.)
func TestChargeWritesAGrantAtItsTime(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 10, 10*time.Second)))
		require.True(t, tryAcquire(t, l, 1))
		core.SetClockOffset(c, -3000)
		ctx, cancel := context.WithCancel(bg)
		cancel()
		res, err := l.TryAcquire(ctx, 1)
		require.ErrorIs(t, err, context.Canceled)
		g := res.Grant
		assert.InDelta(t, time.Now().Add(-3*time.Second).UnixMilli(), g.Time().UnixMilli(), 1000, "by Redis's clock as measured")
		core.SetClockOffset(c, 2000)
		l.Charge(g)
		require.EqualValues(t, 8, available(t, l), "paid with the next call")
		score, err := e.rdb.ZScore(bg, core.Keys(l)[3], core.GrantMember(g)).Result()
		require.NoError(t, err)
		assert.EqualValues(t, g.Time().UnixMilli(), score, "written at its Time, not moved by the new measure")
	})
}

// What a limiter owes goes with its next call, first, in the same round
// trip; a limiter with no call is paid by the Client within moments.
func TestChargesArePaidWithTheNextCall(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		r := rate(core.Overall, 10, 10*time.Second)
		l, idle := c.Limiter(e.name, core.WithRate(r)), c.Limiter(e.name+"-idle", core.WithRate(r))
		require.True(t, tryAcquire(t, l, 1))
		rt := &roundTrips{}
		e.rdb.AddHook(rt)
		start := time.Now()
		l.Charge(core.GrantAt(3, time.Now()))
		res, err := l.TryAcquire(bg, 1)
		took := time.Since(start)
		require.NoError(t, err)
		assert.True(t, res.Allowed)
		assert.EqualValues(t, 5, res.Remaining, "10 - 1 - 3 charged - 1")
		if took < core.FlushEvery {
			// Before the Client's own writer could: the call carried it.
			assert.Equal(t, []int{2}, rt.sizes(), "one round trip: the charge, then the acquire")
		} else {
			t.Logf("the call took %v: the Client's writer may have paid the charge first", took)
		}
		idle.Charge(core.GrantAt(2, time.Now()))
		assert.Eventually(t, func() bool {
			n, err := e.rdb.ZCard(bg, core.Keys(idle)[3]).Result()
			return err == nil && n == 1
		}, 2*time.Second, 10*time.Millisecond, "the idle limiter's charge, paid by the Client")
		assert.EqualValues(t, 8, available(t, idle))
	})
}

// A Redisson client sharing a limiter in debt is denied until the debt is
// paid, and reads its available permits as negative.
func TestRedissonSeesADebt(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		java := newJavaClient(t, e.rdb)
		l := e.client(t).Limiter(e.name, core.WithRate(rate(core.Overall, 10, 10*time.Second)))
		require.True(t, tryAcquire(t, l, 2))
		l.Charge(core.GrantAt(12, time.Now()))
		assert.EqualValues(t, 0, available(t, l), "never negative here")
		assert.EqualValues(t, -4, java.availablePermits(e.name), "10 - 14")
		ok, hint := java.tryAcquire(e.name, 1)
		assert.False(t, ok, "denied")
		assert.Positive(t, hint)
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

// roundTrips is a go-redis hook that records the commands of each round
// trip: one for a command sent alone, their number for a pipeline.
type roundTrips struct {
	mu sync.Mutex
	n  []int
}

func (h *roundTrips) add(n int) {
	h.mu.Lock()
	h.n = append(h.n, n)
	h.mu.Unlock()
}

func (h *roundTrips) sizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.n...)
}

func (*roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(len(cmds))
		return next(ctx, cmds)
	}
}
