package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/internal/testkit/stall"
)

// Calls beyond the bound of waiting calls fail at once with ErrOverloaded:
// local overload, not a Redis failure. A call that waited behind a round
// trip that never ended (Redis answers nothing in time) fails with its
// deadline, as the call in flight does: that is Redis's failure.
func TestOverloadIsNotARedisFailure(t *testing.T) {
	stalls := stall.Watch(t)
	runRedis(t, func(t *testing.T, e *env) {
		// One round trip at a time, each 300 ms: the first call takes it,
		// one more may wait, the others are turned away.
		e.rdb.AddHook(redistest.Slow{Delay: 300 * time.Millisecond, Busy: true})
		c := e.client(t, core.WithCoalescing(1), core.WithMaxQueue(1))
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 1000, time.Minute)), core.WithCallTimeout(100*time.Millisecond))
		var (
			mu                           sync.Mutex
			overloaded, waited, deadline int
			wg                           sync.WaitGroup
		)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, err := l.TryAcquire(bg, 1)
				end := time.Now() // before the lock, which the others hold meanwhile
				took := end.Sub(start)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, core.ErrOverloaded) && errors.Is(err, context.DeadlineExceeded):
					assert.GreaterOrEqual(t, took, 100*time.Millisecond, "waited for its deadline")
					waited++
				case errors.Is(err, core.ErrOverloaded):
					// At once: within 50 ms, and the process's stalls
					// meanwhile (see stall).
					assert.Less(t, took-stalls.During(start, end), 50*time.Millisecond, "turned away at once")
					overloaded++
				case errors.Is(err, context.DeadlineExceeded):
					deadline++
				default:
					t.Errorf("want a deadline or overload, got %v", err)
				}
			}()
			if i < 2 {
				time.Sleep(10 * time.Millisecond) // the first takes the round trip, the second waits
			}
		}
		wg.Wait()
		assert.Equal(t, 2, deadline, "the call in flight, and the one that waited while Redis answered nothing")
		assert.Zero(t, waited)
		assert.Equal(t, 18, overloaded, "the calls beyond the bound")
	})
}

// A call that waited for a connection of the go-redis pool past its
// PoolTimeout (go-redis retries such a wait, and gives up after its
// retries) got no answer in time: it fails with a deadline, as a call
// whose round trip got no answer does, not as a failing Redis, and it
// starts no Outage (the pool is this process's: Redis answers the next
// call at once).
func TestAPoolTimeoutIsNoOutage(t *testing.T) {
	s := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1, PoolTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := core.New(rdb)
	require.NoError(t, err)
	l := c.Limiter(uniqueName(t), core.WithRate(rate(core.Overall, 10, time.Minute)), core.WithCallTimeout(2*time.Second))

	held := rdb.Conn() // the pool's one connection, taken
	require.NoError(t, held.Ping(bg).Err())
	_, err = l.TryAcquire(bg, 1)
	require.ErrorIs(t, err, redis.ErrPoolTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "no answer in time")
	assert.NotErrorIs(t, err, core.ErrUnavailable, "not a failing Redis")

	require.NoError(t, held.Close())
	r, err := l.TryAcquire(bg, 1)
	require.NoError(t, err, "no Outage: Redis decides the next call")
	assert.True(t, r.Allowed)
}
