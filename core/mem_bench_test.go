package core_test

import (
	"context"
	"testing"
	"time"

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
