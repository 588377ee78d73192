package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Calls that wait in this process for a round trip until their deadline
// report local overload (ErrOverloaded), not a Redis failure; a call whose
// round trip was under way reports the deadline alone.
func TestOverloadIsNotARedisFailure(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		// One round trip at a time, each 300 ms: the first call takes it, the
		// others wait in this process past their 100 ms.
		e.rdb.AddHook(redistest.Slow{Delay: 300 * time.Millisecond, Busy: true})
		c := e.client(t, core.WithCoalescing(1))
		l := c.Limiter(e.name, core.WithRate(rate(core.Overall, 1000, time.Minute)), core.WithCallTimeout(100*time.Millisecond))
		var (
			mu                   sync.Mutex
			overloaded, deadline int
			wg                   sync.WaitGroup
		)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := l.TryAcquire(bg, 1)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, core.ErrOverloaded):
					assert.ErrorIs(t, err, context.DeadlineExceeded)
					overloaded++
				case errors.Is(err, context.DeadlineExceeded):
					deadline++
				default:
					t.Errorf("want a deadline or overload, got %v", err)
				}
			}()
			if i == 0 {
				time.Sleep(10 * time.Millisecond) // the first call takes the one round trip
			}
		}
		wg.Wait()
		assert.Equal(t, 1, deadline, "the call whose round trip was under way")
		assert.Equal(t, 19, overloaded, "the calls that waited in this process")
	})
}
