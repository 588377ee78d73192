package core_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

type grant struct {
	at      time.Time // Redis TIME of the decision
	permits int64
}

// assertWeightedWindow checks that no window of interval (a permit granted
// at T counts while now - interval < T) holds more than limit permits, and
// returns the permits granted.
func assertWeightedWindow(t *testing.T, grants []grant, limit int64, interval time.Duration) int64 {
	t.Helper()
	slices.SortFunc(grants, func(a, b grant) int { return a.at.Compare(b.at) })
	var inWindow, total int64
	lo := 0
	for _, g := range grants {
		for !grants[lo].at.After(g.at.Add(-interval)) {
			inWindow -= grants[lo].permits
			lo++
		}
		inWindow += g.permits
		total += g.permits
		if inWindow > limit {
			t.Fatalf("%d permits granted in the %v ending at %v, limit %d", inWindow, interval, g.at, limit)
		}
	}
	return total
}

// Four clients with 32 goroutines each hammer one limiter, asking for 1 to
// 3 permits at a time, for 3 s, on a real server and on a cluster (real
// concurrency: miniredis serialises every script). Judged by the grant times
// Redis recorded: never more than the rate in any sliding window, and the
// limiter keeps granting through the run (at least a quarter of its
// capacity: a check that nothing stalls, not a throughput target, which
// the benchmarks measure; a loaded machine grants less).
func TestConcurrencySlidingWindow(t *testing.T) {
	for _, typ := range []core.RateType{core.Overall, core.PerClient} {
		t.Run(typ.String(), func(t *testing.T) {
			runReal(t, func(t *testing.T, e *env) {
				const (
					clients    = 4
					goroutines = 32
					permits    = 50
					interval   = 500 * time.Millisecond
					duration   = 3 * time.Second
				)
				r := rate(typ, permits, interval)
				var (
					mu     sync.Mutex
					grants = make([][]grant, clients)
					wg     sync.WaitGroup
				)
				ctx, cancel := context.WithTimeout(context.Background(), duration)
				defer cancel()
				for c := 0; c < clients; c++ {
					l := e.client(t).Limiter(e.name, core.WithRate(r))
					for g := 0; g < goroutines; g++ {
						wg.Go(func() {
							for ctx.Err() == nil {
								n := 1 + rand.Int64N(3)
								res, err := l.TryAcquireWithin(ctx, n, 100*time.Millisecond)
								if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
									return // the run is over (its timer may not have fired yet)
								}
								if !assert.NoError(t, err) {
									return
								}
								if res.Allowed {
									mu.Lock()
									grants[c] = append(grants[c], grant{core.DecisionTime(res), n})
									mu.Unlock()
								}
							}
						})
					}
				}
				wg.Wait()
				capacity := int64(duration/interval) * permits
				if typ == core.Overall {
					total := assertWeightedWindow(t, slices.Concat(grants...), permits, interval)
					t.Logf("%s: %d permits granted, capacity %d", e.kind, total, capacity)
					assert.GreaterOrEqual(t, total, capacity/4)
					return
				}
				for c := range grants {
					total := assertWeightedWindow(t, grants[c], permits, interval)
					t.Logf("%s client %d: %d permits granted, capacity %d", e.kind, c, total, capacity)
					assert.GreaterOrEqual(t, total, capacity/4)
				}
			})
		})
	}
}

// Many limiters at once, each with its own budget.
func TestConcurrencyManyLimiters(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t)
		var wg sync.WaitGroup
		for i := 0; i < 64; i++ {
			wg.Go(func() {
				l := c.Limiter(e.name+"."+itoa(int64(i)), core.WithRate(rate(core.Overall, 5, time.Minute)))
				for j := 0; j < 5; j++ {
					ok := tryAcquire(t, l, 1)
					assert.True(t, ok)
				}
				assert.False(t, tryAcquire(t, l, 1))
			})
		}
		wg.Wait()
		require.False(t, t.Failed())
	})
}
