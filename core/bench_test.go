package core_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// Benchmarks of one decision against a real redis-server:
//
//	go test -run '^$' -bench . -benchmem ./core/
func benchClient(b *testing.B, opts ...core.Option) *core.Client {
	s := redistest.Shared(b)
	c, err := core.New(s.Client(b), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// Allowed: the limit is never reached.
func BenchmarkTryAcquireAllowed(b *testing.B) {
	c := benchClient(b)
	l := c.Limiter(uniqueName(b), core.WithRate(core.Rate{Permits: core.MaxPermits, Interval: time.Millisecond}))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.TryAcquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// Allowed, many goroutines, many distinct limiters (one per "client").
func BenchmarkTryAcquireAllowedParallel(b *testing.B) {
	c := benchClient(b)
	prefix := uniqueName(b)
	var n atomic.Int64
	ctx := context.Background()
	r := core.Rate{Permits: core.MaxPermits, Interval: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		l := c.Limiter(prefix+strconv.FormatInt(n.Add(1), 10), core.WithRate(r))
		for pb.Next() {
			if _, err := l.TryAcquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Denied on a hot key, with and without the local denial cache.
func BenchmarkTryAcquireDenied(b *testing.B) {
	for _, cached := range []int{core.DefaultDenialCache, 0} {
		b.Run("cache="+strconv.FormatBool(cached > 0), func(b *testing.B) {
			c := benchClient(b, core.WithDenialCache(cached))
			l := c.Limiter(uniqueName(b), core.WithRate(core.PerHour(1)))
			ctx := context.Background()
			if _, err := l.TryAcquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				r, err := l.TryAcquire(ctx, 1)
				if err != nil || r.Allowed {
					b.Fatal(err, r.Allowed)
				}
			}
		})
	}
}
