package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// The embedded Redis expires keys as Redis does: an idle client's limiter
// disappears after its keepAlive.
func TestEmbeddedRedisExpiresKeys(t *testing.T) {
	addr, stop, err := Start()
	require.NoError(t, err)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, err := core.New(rdb)
	require.NoError(t, err)
	ctx := context.Background()
	r := core.Rate{Permits: 5, Interval: 50 * time.Millisecond, KeepAlive: 100 * time.Millisecond}
	res, err := c.Limiter("embedded-test", core.WithRate(r)).TryAcquire(ctx, 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "config, counter and log")
	assert.Eventually(t, func() bool {
		n, err := rdb.DBSize(ctx).Result()
		return err == nil && n == 0
	}, 2*time.Second, 10*time.Millisecond, "keys still there after their keepAlive")
}

// Stop stops the embedded Redis: its address no longer answers.
func TestStopStops(t *testing.T) {
	addr, stop, err := Start()
	require.NoError(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	stop()
	assert.Error(t, rdb.Ping(context.Background()).Err())
}
