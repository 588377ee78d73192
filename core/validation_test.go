package core_test

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// deadRedis returns a client whose every command would fail to connect, so
// a typed error from it proves the call was rejected before any I/O.
func deadRedis(t *testing.T) (*redis.Client, *atomic.Int64) {
	var dials atomic.Int64
	rdb := redis.NewClient(&redis.Options{
		Addr:       "127.0.0.1:1",
		MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return nil, errors.New("no I/O expected")
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, &dials
}

func TestNewValidatesOptionsOnly(t *testing.T) {
	_, err := core.New(nil)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	rdb, dials := deadRedis(t)
	for _, o := range []core.Option{
		core.WithClientID(""),
		core.WithClientID(strings.Repeat("x", 257)),
		core.WithKeyPrefix(strings.Repeat("x", core.MaxNameLen+1)),
		nil,
	} {
		_, err := core.New(rdb, o)
		assert.ErrorIs(t, err, core.ErrInvalidOption)
	}
	c, err := core.New(rdb, core.WithKeyPrefix("rl:"), core.WithClientID("pod-1"), core.WithDenialCache(0))
	require.NoError(t, err, "New does no I/O: Redis may be down")
	assert.Equal(t, "pod-1", core.ClientID(c))
	assert.Zero(t, dials.Load())
}

func TestRateValidate(t *testing.T) {
	ok := []core.Rate{
		core.PerSecond(1), core.PerMinute(100), core.PerHour(core.MaxPermits),
		{Type: core.PerClient, Permits: 5, Interval: time.Millisecond},
		{Permits: 5, Interval: time.Second, KeepAlive: time.Second},
		{Permits: 5, Interval: 1500 * time.Millisecond, KeepAlive: time.Hour},
	}
	for _, r := range ok {
		assert.NoError(t, r.Validate(), "%v", r)
	}
	bad := []core.Rate{
		{Permits: 0, Interval: time.Second},
		{Permits: -1, Interval: time.Second},
		{Permits: core.MaxPermits + 1, Interval: time.Second},
		{Permits: math.MaxInt64, Interval: time.Second},
		{Permits: 1, Interval: 0},
		{Permits: 1, Interval: -time.Second},
		{Permits: 1, Interval: 500 * time.Microsecond},
		{Permits: 1, Interval: 1500 * time.Microsecond},
		{Permits: 1, Interval: time.Second, KeepAlive: 500 * time.Millisecond},
		{Permits: 1, Interval: time.Second, KeepAlive: -time.Second},
		{Permits: 1, Interval: time.Second, KeepAlive: 1500*time.Millisecond + time.Microsecond},
		{Type: 2, Permits: 1, Interval: time.Second},
		{Type: -1, Permits: 1, Interval: time.Second},
	}
	for _, r := range bad {
		assert.ErrorIs(t, r.Validate(), core.ErrInvalidRate, "%+v", r)
	}
}

// Every bad argument is a typed error before any I/O: the client below
// cannot reach any server.
func TestBadInputBeforeIO(t *testing.T) {
	rdb, dials := deadRedis(t)
	c, err := core.New(rdb)
	require.NoError(t, err)
	ctx := context.Background()

	for _, name := range []string{
		"", strings.Repeat("n", core.MaxNameLen+1),
		"a}b", "a{b", "a{}b", "{}", "}{", "x{y",
	} {
		l := c.Limiter(name)
		_, err := l.TryAcquire(ctx, 1)
		assert.ErrorIs(t, err, core.ErrInvalidName, "%q", name)
		_, err = l.TrySetRate(ctx, core.PerSecond(1))
		assert.ErrorIs(t, err, core.ErrInvalidName)
		_, err = l.Config(ctx)
		assert.ErrorIs(t, err, core.ErrInvalidName)
		_, err = l.AvailablePermits(ctx)
		assert.ErrorIs(t, err, core.ErrInvalidName)
		_, err = l.Delete(ctx)
		assert.ErrorIs(t, err, core.ErrInvalidName)
		_, err = l.ClearExpire(ctx)
		assert.ErrorIs(t, err, core.ErrInvalidName)
		assert.ErrorIs(t, l.Acquire(ctx, 1), core.ErrInvalidName)
		assert.ErrorIs(t, l.Release(ctx, 1), core.ErrInvalidName)
	}
	assert.ErrorIs(t, errOf(c.Limiter("x", nil).TryAcquire(ctx, 1)), core.ErrInvalidOption)
	assert.ErrorIs(t, errOf(c.Limiter("x", core.WithRate(core.Rate{})).TryAcquire(ctx, 1)), core.ErrInvalidRate)

	l := c.Limiter("ok")
	for _, n := range []int64{0, -1, math.MinInt64, math.MaxInt64, core.MaxPermits + 1} {
		assert.ErrorIs(t, errOf(l.TryAcquire(ctx, n)), core.ErrInvalidPermits, "%d", n)
		assert.ErrorIs(t, errOf(l.TryAcquireWithin(ctx, n, time.Second)), core.ErrInvalidPermits)
		assert.ErrorIs(t, l.Acquire(ctx, n), core.ErrInvalidPermits)
		assert.ErrorIs(t, l.Release(ctx, n), core.ErrInvalidPermits)
	}
	coded := c.Limiter("ok", core.WithRate(core.PerSecond(10)))
	assert.ErrorIs(t, errOf(coded.TryAcquire(ctx, 11)), core.ErrPermitsExceedRate)
	assert.ErrorIs(t, coded.Acquire(ctx, 11), core.ErrPermitsExceedRate)

	for _, r := range []core.Rate{{}, {Permits: 1, Interval: time.Second, KeepAlive: time.Millisecond}} {
		assert.ErrorIs(t, errOf(l.TrySetRate(ctx, r)), core.ErrInvalidRate)
		assert.ErrorIs(t, l.SetRate(ctx, r), core.ErrInvalidRate)
		assert.ErrorIs(t, errOf(l.UpdateRate(ctx, r)), core.ErrInvalidRate)
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, 1500 * time.Microsecond} {
		assert.ErrorIs(t, errOf(l.Expire(ctx, ttl)), core.ErrInvalidDuration, "%v", ttl)
	}
	assert.Zero(t, dials.Load(), "nothing reached the network")
}

func errOf[T any](_ T, err error) error { return err }

// Valid but unusual names work and keep their keys in one cluster slot:
// ':' and binary bytes, a hash tag, the longest name allowed.
func TestUnusualNames(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		for _, name := range []string{
			e.name + ":a:b", e.name + "\x00\xff\n*?", "{" + e.name + "}:x",
			"pre{" + e.name + "}post", e.name + strings.Repeat("L", core.MaxNameLen-len(e.name)),
		} {
			l := e.client(t).Limiter(name, core.WithRate(rate(core.Overall, 2, time.Minute)))
			assert.True(t, tryAcquire(t, l, 2), "%q", name)
			assert.False(t, tryAcquire(t, l, 1))
			assert.EqualValues(t, 0, available(t, l))
			deleted, err := l.Delete(bg)
			require.NoError(t, err)
			assert.True(t, deleted)
		}
	})
}

// A Redis error is returned wrapped, so errors.Is still finds the cause.
func TestRedisErrorsAreWrapped(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := core.New(rdb)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Limiter("x").TryAcquire(ctx, 1)
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, strings.HasPrefix(err.Error(), "core: "), err.Error())
	_, err = c.Limiter("x").TryAcquire(context.Background(), 1)
	require.Error(t, err)
	var opErr *net.OpError
	assert.ErrorAs(t, err, &opErr)
}
