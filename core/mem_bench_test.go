package core_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/memredis"
)

func BenchmarkDecisionMemory(b *testing.B) {
	c, _ := core.New(memredis.New())
	ctx := context.Background()
	r := core.WithRate(core.PerMinute(1_000_000))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Limiter("key:192.0.2.1", r).TryAcquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// As the middleware decides: with a call timeout.
func BenchmarkDecisionMemoryTimeout(b *testing.B) {
	c, _ := core.New(memredis.New())
	ctx := context.Background()
	opts := []core.LimiterOption{core.WithRate(core.PerMinute(1_000_000)), core.WithCallTimeout(10 * time.Second)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Limiter("key:192.0.2.1", opts...).TryAcquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// A decision the middleware makes (a limiter made for it, a call timeout)
// allocates 6 objects: the limiter with its first call, its keys, and the
// timeout's context.WithTimeout (4). The member and the script's
// arguments live in the call.
func TestADecisionAllocatesSix(t *testing.T) {
	c, err := core.New(memredis.New())
	require.NoError(t, err)
	ctx := context.Background()
	opts := []core.LimiterOption{core.WithRate(core.PerMinute(1_000_000)), core.WithCallTimeout(10 * time.Second)}
	var r core.Result
	allocs := testing.AllocsPerRun(200, func() {
		r, err = c.Limiter("key:192.0.2.1", opts...).TryAcquire(ctx, 1)
	})
	require.NoError(t, err)
	assert.True(t, r.Allowed)
	assert.Equal(t, 6.0, allocs)
}

// A limiter outlives its decisions (a long-lived one, or one the Client
// keeps for a failover): once answered, the call made with it keeps
// nothing of the request, whose context may hold the request itself. (No
// call timeout here: the runtime keeps a stopped timer, and so the
// timeout's context, for a while after the call.)
func TestALimiterKeepsNothingOfAnAnsweredRequest(t *testing.T) {
	c, err := core.New(memredis.New())
	require.NoError(t, err)
	type key struct{}
	req := new([1 << 10]byte) // what the request's context holds
	held := weak.Make(req)
	ctx := context.WithValue(context.Background(), key{}, req)
	l := c.Limiter("key:192.0.2.1", core.WithRate(core.PerMinute(10)))
	r, err := l.TryAcquire(ctx, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	req, ctx = nil, nil
	runtime.GC()
	assert.Nil(t, held.Value(), "the limiter keeps the request's context")
	runtime.KeepAlive(l)
}
