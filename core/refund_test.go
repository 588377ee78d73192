package core_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// mustGrant asserts that an acquire of permits is granted and returns its grant.
func mustGrant(t *testing.T, l *core.Limiter, permits int64) core.Grant {
	t.Helper()
	r, err := l.TryAcquire(bg, permits)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.False(t, r.Grant == (core.Grant{}))
	return r.Grant
}

func refund(t *testing.T, l *core.Limiter, g core.Grant) bool {
	t.Helper()
	ok, err := l.Refund(bg, g)
	require.NoError(t, err)
	return ok
}

// Refund gives back exactly the grant it names, even with later grants in
// the log, once; other grants stay.
func TestRefundGivesBackThatGrantOnce(t *testing.T) {
	for _, typ := range []core.RateType{core.Overall, core.PerClient} {
		t.Run(typ.String(), func(t *testing.T) {
			run(t, func(t *testing.T, e *env) {
				l := e.limiter(t, core.WithRate(rate(typ, 10, time.Minute)))
				a := mustGrant(t, l, 2)
				b := mustGrant(t, l, 1)
				c := mustGrant(t, l, 3)
				assert.EqualValues(t, 4, available(t, l))
				assert.True(t, refund(t, l, b))
				assert.EqualValues(t, 5, available(t, l))
				assert.False(t, refund(t, l, b), "refunded once")
				assert.EqualValues(t, 5, available(t, l))
				assert.True(t, refund(t, l, a))
				assert.EqualValues(t, 7, available(t, l))
				members, err := e.rdb.ZRange(bg, core.Keys(l)[3+int(typ)], 0, -1).Result()
				require.NoError(t, err)
				assert.Len(t, members, 1, "only the grant of 3 is left")
				assert.True(t, refund(t, l, c))
				assert.EqualValues(t, 10, available(t, l))
				assert.False(t, refund(t, l, core.Grant{}), "a zero grant")
				r, err := l.TryAcquire(bg, 10)
				require.NoError(t, err)
				assert.True(t, r.Allowed, "the whole rate is back")
			})
		})
	}
}

// A grant that left the window is not refunded: its permits came back
// already, and the counter never exceeds the rate.
func TestRefundAfterTheWindowDoesNothing(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t, core.WithRate(rate(core.Overall, 3, 200*time.Millisecond)))
		g := mustGrant(t, l, 3)
		time.Sleep(250 * time.Millisecond)
		assert.False(t, refund(t, l, g))
		assert.EqualValues(t, 3, available(t, l))
		mustGrant(t, l, 3)
		r, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.False(t, r.Allowed, "no permit was credited twice")
	})
}

// Refunds racing new grants: 64 goroutines each take a permit, then half
// of them give theirs back. The log then holds exactly the grants that were
// not refunded, and the counter agrees with it.
func TestRefundsRacingGrants(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		const callers = 64
		l := e.limiter(t, core.WithRate(rate(core.Overall, 1000, time.Minute)))
		var wg sync.WaitGroup
		refunded := make([]bool, callers)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := l.TryAcquire(bg, 1)
				if !assert.NoError(t, err) || !assert.True(t, r.Allowed) {
					return
				}
				if i%2 == 0 {
					ok, err := l.Refund(bg, r.Grant)
					assert.NoError(t, err)
					refunded[i] = ok
				}
			}()
		}
		wg.Wait()
		n := 0
		for _, ok := range refunded {
			if ok {
				n++
			}
		}
		assert.Equal(t, callers/2, n)
		members, err := e.rdb.ZCard(bg, core.Keys(l)[3]).Result()
		require.NoError(t, err)
		assert.EqualValues(t, callers/2, members)
		assert.EqualValues(t, 1000-callers/2, available(t, l))
	})
}

// A refund resent after a lost reply refunds once (the resend, which is
// what the caller sees, finds nothing left to refund).
func TestRefundIsIdempotent(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		h := addHook(e)
		l := e.limiter(t, core.WithRate(rate(core.Overall, 5, time.Minute)))
		g1, g2 := mustGrant(t, l, 2), mustGrant(t, l, 2)
		h.resend.Store(true)
		assert.False(t, refund(t, l, g1), "the resend's reply")
		h.resend.Store(false)
		assert.EqualValues(t, 3, available(t, l), "refunded once")
		assert.True(t, refund(t, l, g2))
		assert.EqualValues(t, 5, available(t, l))
	})
}
