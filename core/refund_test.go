package core_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
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

// lateCharge answers the first script call that writes member with a
// timeout, as a round trip this process was too busy for, and runs it in
// Redis only when a later call changes that grant: the late script of a
// payment sent before its answer came too late. It records when the late
// call came.
type lateCharge struct {
	member  string
	raw     redis.UniversalClient // runs the late payment
	held    chan struct{}         // closed once it holds the payment
	mu      sync.Mutex
	failed  time.Time // when the payment was answered with a timeout
	next    time.Time // when the next call on the grant came
	pending func() error
	lateErr error // the late payment's
}

func (h *lateCharge) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateCharge) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.changes(cmd) {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.failed.IsZero() {
			args := slices.Clone(cmd.Args())
			h.pending = func() error { return h.raw.Do(context.Background(), args...).Err() }
			h.failed = time.Now()
			close(h.held)
			cmd.SetErr(context.DeadlineExceeded)
			return cmd.Err()
		}
		h.late()
		return next(ctx, cmd)
	}
}

func (h *lateCharge) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, h.changes) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.late()
		}
		return next(ctx, cmds)
	}
}

// changes reports whether cmd changes the grant.
func (h *lateCharge) changes(cmd redis.Cmder) bool { return slices.Contains(cmd.Args(), any(h.member)) }

// late runs the held payment, late, once a later call changes the grant. It
// requires that h.mu is held.
func (h *lateCharge) late() {
	if h.pending == nil || h.failed.IsZero() {
		return
	}
	h.next = time.Now()
	h.lateErr = h.pending()
	h.pending = nil
}

// A payment that got no answer in time may still run: the grant's later
// changes (here its refund) wait until it could only have run, so that it
// never writes back a grant that was given back, also when the limiter's
// next call would carry them at once. The late payment then changes
// nothing, and the refund finds the grant.
func TestALatePaymentGoesBeforeItsGrantsRefund(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		c := e.client(t)
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 10, time.Minute)))
		g := core.GrantAt(3, time.Now())
		h := &lateCharge{member: core.MemberOf(g), raw: redistest.Shared(t).Client(t), held: make(chan struct{})}
		require.NoError(t, h.raw.ScriptLoad(bg, core.ChargeScript).Err(), "the late payment finds its script")
		e.rdb.AddHook(h)
		l.Charge(g)
		select {
		case <-h.held:
		case <-time.After(5 * time.Second):
			require.FailNow(t, "the charge was never paid")
		}
		ok, err := l.Refund(bg, g)
		require.NoError(t, err)
		assert.False(t, ok, "owed: the grant is not in Redis yet")
		require.True(t, tryAcquire(t, l, 1), "a call that would carry what the limiter owes")
		require.Eventually(t, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return !h.next.IsZero()
		}, 5*time.Second, 10*time.Millisecond, "the grant's refund is paid")
		h.mu.Lock()
		took, lateErr := h.next.Sub(h.failed), h.lateErr
		h.mu.Unlock()
		require.NoError(t, lateErr, "the late payment ran")
		assert.GreaterOrEqual(t, took, core.RoundTripGrace,
			"no change of the grant goes before the late payment could only have run")
		err = e.rdb.ZScore(bg, core.Keys(l)[3], h.member).Err()
		assert.ErrorIs(t, err, redis.Nil, "the grant is given back")
		assert.EqualValues(t, 9, available(t, l), "the acquire's permit is out")
	})
}

// A refund of a grant that the Client is to write again (as it does into a
// promoted master, for the grants of the last window, which its replica
// may have missed) goes after that write, so that the write does not put
// back a grant that was given back.
func TestARefundGoesAfterWhatIsOwedOnItsGrant(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		c := e.client(t)
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 10, time.Minute)))
		g := mustGrant(t, l, 3)
		core.WriteAgain(l, g)
		assert.False(t, refund(t, l, g), "owed, after the write")
		assert.Eventually(t, func() bool {
			n, err := l.AvailablePermits(bg)
			return err == nil && n == 10 && errors.Is(e.rdb.ZScore(bg, core.Keys(l)[3], core.MemberOf(g)).Err(), redis.Nil)
		}, 5*time.Second, 10*time.Millisecond, "the grant is given back, and stays so")
		time.Sleep(2 * core.FlushEvery)
		assert.EqualValues(t, 10, available(t, l), "nothing written after it")
	})
}

// A grant given back is not written into a promoted master: after a
// failover the Client writes its recent grants again (those the new master
// has count once), but not one it refunded, which would count again.
func TestARefundedGrantIsNotWrittenAgain(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		c := e.client(t)
		replay := core.KeepRecent(c)
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 10, time.Minute)))
		kept, given := mustGrant(t, l, 2), mustGrant(t, l, 3)
		assert.True(t, refund(t, l, given))
		replay()
		assert.Eventually(t, func() bool { return core.Owed(c) == 0 }, 5*time.Second, 10*time.Millisecond)
		time.Sleep(2 * core.FlushEvery) // what the writer took is written
		assert.EqualValues(t, 8, available(t, l), "the kept grant counts once, the refunded one not at all")
		members, err := e.rdb.ZRange(bg, core.Keys(l)[3], 0, -1).Result()
		require.NoError(t, err)
		assert.Equal(t, []string{core.MemberOf(kept)}, members)
	})
}

// A refund that changes nothing (its grant refunded already) still drops
// the grants that left the window from the log, as every call does: their
// permits come back with them, not lost until the log empties.
func TestARefundThatChangesNothingGivesBackWhatLeft(t *testing.T) {
	for _, typ := range []core.RateType{core.Overall, core.PerClient} {
		t.Run(typ.String(), func(t *testing.T) {
			run(t, func(t *testing.T, e *env) {
				l := e.limiter(t, core.WithRate(rate(typ, 3, time.Minute)))
				pkey := core.Keys(l)[3+int(typ)]
				old := mustGrant(t, l, 1)
				g := mustGrant(t, l, 1)
				require.True(t, refund(t, l, g))
				mustGrant(t, l, 1)
				assert.EqualValues(t, 1, available(t, l))
				// The oldest grant leaves the window: its score, two minutes back.
				score, err := e.rdb.ZScore(bg, pkey, core.GrantMember(old)).Result()
				require.NoError(t, err)
				require.NoError(t, e.rdb.ZAddXX(bg, pkey, redis.Z{Score: score - 120_000, Member: core.GrantMember(old)}).Err())

				assert.False(t, refund(t, l, g), "refunded once")
				n, err := e.rdb.ZCard(bg, pkey).Result()
				require.NoError(t, err)
				assert.EqualValues(t, 1, n, "the grant that left is dropped")
				assert.EqualValues(t, 2, available(t, l), "and its permit is back")
				r, err := l.TryAcquire(bg, 2)
				require.NoError(t, err)
				assert.True(t, r.Allowed)
			})
		})
	}
}
