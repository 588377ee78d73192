package memredis

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Decide measures the core decision alone, on a memory Redis: TryAcquire
// of one permit on the limiter name at rate, as a middleware makes it. It
// is the "core" part of the adapters' benchmarks, which subtract it from
// their middleware's cost.
func Decide(b *testing.B, name string, rate core.Rate) {
	client, err := core.New(New())
	if err != nil {
		b.Fatal(err)
	}
	opts := []core.LimiterOption{core.WithRate(rate), core.WithCallTimeout(10 * time.Second)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.Limiter(name, opts...).TryAcquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}
