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

type (
	callerKey struct{} // a caller's number, in its context
	tripKey   struct{} // set by the round trip hook
)

// tripMarks is a go-redis hook that counts the commands and pipelines
// whose context the round trip hook made, and the others.
type tripMarks struct {
	mu               sync.Mutex
	marked, unmarked int
}

func (h *tripMarks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tripMarks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmd)
	}
}

func (h *tripMarks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmds)
	}
}

func (h *tripMarks) note(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Value(tripKey{}) != nil {
		h.marked++
	} else {
		h.unmarked++
	}
}

// The round trip hook wraps every round trip: it gets the contexts of the
// callers whose calls the round trip carries, each caller's call once (a
// payment of what the limiter owes, in the same round trip, has none), and
// go-redis gets the context it returns.
func TestRoundTripHook(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		marks := &tripMarks{}
		e.rdb.AddHook(marks)
		var (
			mu           sync.Mutex
			carried      = map[int]int{} // caller -> round trips that carried its call
			trips, ended int
		)
		hook := func(ctx context.Context, callers []context.Context) (context.Context, func(error)) {
			mu.Lock()
			defer mu.Unlock()
			trips++
			for _, cc := range callers {
				n, ok := cc.Value(callerKey{}).(int)
				assert.True(t, ok, "a caller's context")
				carried[n]++
			}
			return context.WithValue(ctx, tripKey{}, true), func(err error) {
				assert.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				ended++
			}
		}
		c := e.client(t, core.WithCoalescing(1), core.WithRoundTripHook(hook))
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 1000, time.Minute)))
		l.Charge(core.GrantAt(1, time.Now())) // paid with the next call, or by the Client
		const callers = 32
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				_, err := l.TryAcquire(context.WithValue(bg, callerKey{}, i), 1)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		require.Eventually(t, func() bool { return core.Owed(c) == 0 }, 5*time.Second, 10*time.Millisecond)

		mu.Lock()
		defer mu.Unlock()
		assert.Len(t, carried, callers)
		for i := range callers {
			assert.Equal(t, 1, carried[i], "caller %d's call carried once", i)
		}
		assert.Equal(t, trips, ended, "every round trip ended")
		marks.mu.Lock()
		defer marks.mu.Unlock()
		assert.GreaterOrEqual(t, marks.marked, trips, "a go-redis call or more per round trip (a resend after NOSCRIPT)")
		assert.Zero(t, marks.unmarked, "every go-redis call on the hook's context")
	})
}

// A round trip that fails ends with its failure; without a hook, a nil
// one is an invalid option.
func TestRoundTripHookGetsTheFailure(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	_, err := core.New(rdb, core.WithRoundTripHook(nil))
	require.ErrorIs(t, err, core.ErrInvalidOption)

	failures := make(chan error, 1)
	c, err := core.New(rdb, core.WithRoundTripHook(func(ctx context.Context, _ []context.Context) (context.Context, func(error)) {
		return ctx, func(err error) { failures <- err }
	}))
	require.NoError(t, err)
	_, err = c.Limiter("x").TryAcquire(bg, 1)
	require.ErrorIs(t, err, core.ErrUnavailable)
	assert.ErrorIs(t, <-failures, core.ErrUnavailable)
}
