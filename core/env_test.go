package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// env is one Redis backend for one test.
type env struct {
	kind string // "miniredis", "redis" or "cluster"
	rdb  redis.UniversalClient
	mr   *miniredis.Miniredis // miniredis only
	name string               // a limiter name unique to the test
	ctx  context.Context
}

// virtual reports whether time is the synctest bubble's fake clock.
func (e *env) virtual() bool { return e.mr != nil }

func (e *env) client(t testing.TB, opts ...core.Option) *core.Client {
	t.Helper()
	if e.virtual() {
		// miniredis is reached through net.Pipe, which has no buffer: a
		// pipeline deadlocks on it (see WithCoalescing), and miniredis runs
		// one command at a time anyway.
		opts = append([]core.Option{core.WithCoalescing(0)}, opts...)
	}
	c, err := core.New(e.rdb, opts...)
	require.NoError(t, err)
	return c
}

// limiter returns the test's limiter on a new Client.
func (e *env) limiter(t testing.TB, opts ...core.LimiterOption) *core.Limiter {
	t.Helper()
	return e.client(t).Limiter(e.name, opts...)
}

// exists counts which of keys exist.
func (e *env) exists(t testing.TB, keys ...string) int64 {
	t.Helper()
	var n int64
	for _, k := range keys { // one by one: EXISTS on several keys is cross-slot on a cluster
		c, err := e.rdb.Exists(e.ctx, k).Result()
		require.NoError(t, err)
		n += c
	}
	return n
}

// run runs f on every backend: miniredis in a synctest bubble, where both
// Redis TIME and Go timers follow the bubble's fake clock so sleeps take no
// real time; a real redis-server; and a 3-master Redis Cluster. Backends run
// in parallel.
func run(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		runMini(t, f)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		runRedis(t, f)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		runCluster(t, f)
	})
}

func runMini(t *testing.T, f func(t *testing.T, e *env)) {
	synctest.Test(t, func(t *testing.T) {
		mr := miniredis.NewMiniRedis()
		mr.ClockTTL(true) // TTLs follow the (fake) clock too
		rdb := redis.NewClient(&redis.Options{
			Addr:   "127.0.0.1:0", // an IP: no DNS lookup, which synctest forbids
			Dialer: func(context.Context, string, string) (net.Conn, error) { return mr.Dial() },
			// Never wait for a pooled connection: go-redis times such waits
			// with timers shared process-wide, which a bubble must not touch.
			PoolSize: 1024,
		})
		t.Cleanup(func() {
			_ = rdb.Close()
			mr.Close()
		})
		f(t, &env{kind: "miniredis", rdb: rdb, mr: mr, name: uniqueName(t), ctx: context.Background()})
	})
}

func runRedis(t *testing.T, f func(t *testing.T, e *env)) {
	s := redistest.Shared(t)
	f(t, &env{kind: "redis", rdb: s.Client(t), name: uniqueName(t), ctx: context.Background()})
}

func runCluster(t *testing.T, f func(t *testing.T, e *env)) {
	c := redistest.SharedCluster(t)
	f(t, &env{kind: "cluster", rdb: c.Client(t), name: uniqueName(t), ctx: context.Background()})
}

// uniqueName makes a limiter name from the test's name, unique across runs
// on a shared server.
func uniqueName(t testing.TB) string {
	n := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s.%08x", n, rand.Uint32())
}

// rate is a short way to write a Rate in tests.
func rate(typ core.RateType, permits int64, interval time.Duration) core.Rate {
	return core.Rate{Type: typ, Permits: permits, Interval: interval}
}

// tryAcquire asserts that TryAcquire returns no error and returns Allowed.
func tryAcquire(t testing.TB, l *core.Limiter, permits int64) bool {
	t.Helper()
	r, err := l.TryAcquire(context.Background(), permits)
	require.NoError(t, err)
	return r.Allowed
}

// available asserts that AvailablePermits returns no error.
func available(t testing.TB, l *core.Limiter) int64 {
	t.Helper()
	n, err := l.AvailablePermits(context.Background())
	require.NoError(t, err)
	return n
}

// trySetRate asserts that TrySetRate returns no error.
func trySetRate(t testing.TB, l *core.Limiter, r core.Rate) bool {
	t.Helper()
	ok, err := l.TrySetRate(context.Background(), r)
	require.NoError(t, err)
	return ok
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func parseInt(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
