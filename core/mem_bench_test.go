package core_test

import (
	"context"
	"testing"
	"time"

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
