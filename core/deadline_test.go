package core_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// blackhole accepts connections and never answers: Redis hung.
func blackhole(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or written
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// A call ends at its deadline whether or not the go-redis client stops its
// own I/O there: without ContextTimeoutEnabled, go-redis would wait for its
// ReadTimeout (3 s).
func TestCallsEndAtTheirDeadline(t *testing.T) {
	addr := blackhole(t)
	for _, ctxIO := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: ctxIO, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		for _, coalesce := range []int{0, 2} {
			c, err := core.New(rdb, core.WithCoalescing(coalesce))
			require.NoError(t, err)
			l := c.Limiter("x", core.WithRate(core.PerSecond(10)), core.WithCallTimeout(100*time.Millisecond))
			calls := map[string]func() error{
				"TryAcquire":       func() error { return errOf(l.TryAcquire(bg, 1)) },
				"AvailablePermits": func() error { return errOf(l.AvailablePermits(bg)) },
				"SetRate":          func() error { return l.SetRate(bg, core.PerSecond(10)) },
				"Delete":           func() error { return errOf(l.Delete(bg)) },
			}
			for name, call := range calls {
				start := time.Now()
				err := call()
				assert.ErrorIs(t, err, context.DeadlineExceeded, "%s (ContextTimeoutEnabled %v, coalescing %d)", name, ctxIO, coalesce)
				assert.Less(t, time.Since(start), time.Second, "%s (ContextTimeoutEnabled %v, coalescing %d): not go-redis's 3 s", name, ctxIO, coalesce)
			}
			// The caller's own deadline, without a call timeout.
			ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
			start := time.Now()
			_, err = c.Limiter("y", core.WithRate(core.PerSecond(10))).TryAcquire(ctx, 1)
			cancel()
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, time.Since(start), time.Second)
		}
	}
}
