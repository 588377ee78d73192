package demo

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// The embedded Redis expires keys as Redis does: an idle client's limiter
// disappears after its keepAlive.
func TestEmbeddedRedisExpiresKeys(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	c, stop := Client()
	defer stop()
	ctx := context.Background()
	r := core.Rate{Permits: 5, Interval: 50 * time.Millisecond, KeepAlive: 100 * time.Millisecond}
	res, err := c.Limiter("demo-test", core.WithRate(r)).TryAcquire(ctx, 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	n, err := c.Redis().DBSize(ctx).Result()
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "config, counter and log")
	assert.Eventually(t, func() bool {
		n, err := c.Redis().DBSize(ctx).Result()
		return err == nil && n == 0
	}, 2*time.Second, 10*time.Millisecond, "keys still there after their keepAlive")
}
