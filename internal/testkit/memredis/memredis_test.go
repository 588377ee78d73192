package memredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/memredis"
)

func TestAnswersAcquire(t *testing.T) {
	c, err := core.New(memredis.New())
	require.NoError(t, err)
	r, err := c.Limiter("x", core.WithRate(core.PerMinute(10))).TryAcquire(context.Background(), 1)
	require.NoError(t, err)
	assert.True(t, r.Allowed)
	assert.EqualValues(t, memredis.Remaining, r.Remaining)
	assert.Equal(t, time.Minute, r.ResetAfter)
	_, err = c.Limiter("x").TryAcquire(context.Background(), 1)
	assert.Error(t, err, "only code-defined rates are answered")
}
