package grpcrl_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/policy"
)

// A quota's refusal is ResourceExhausted with a RetryInfo that runs to the
// next midnight by Redis's clock, rounded up, as retry-after does, and a
// QuotaFailure naming the policy; ratelimit-policy's w is the day's length.
func TestQuota(t *testing.T) {
	client, rdb := shared(t)
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	// A zone whose next midnight is about 12 hours away.
	boundary := now.Add(12 * time.Hour).Truncate(time.Second)
	off := int((-boundary.Unix()%86_400 + 86_400) % 86_400)
	if off > 12*3600 {
		off -= 86_400
	}
	q := core.Quota{Limit: 2, Period: core.Day, Location: time.FixedZone("test", off)}
	conn := unary(t, policy.MustNewQuota(client, "daily", q))
	for i := range 2 {
		header, err := invoke(t, conn, unaryMethod)
		require.NoError(t, err, "call %d", i+1)
		assert.Equal(t, []string{`"daily";q=2;w=86400`}, header.Get("ratelimit-policy"))
	}
	before, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	header, err := invoke(t, conn, unaryMethod)
	after, err2 := rdb.Time(context.Background()).Result()
	require.NoError(t, err2)
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, "The request quota of this client for the current day is used up; retry after the time in Retry-After.", st.Message())
	retry, quota := details(t, err)
	require.NotNil(t, retry, "RetryInfo")
	wait := retry.GetRetryDelay().AsDuration()
	assert.GreaterOrEqual(t, wait, boundary.Sub(after), "never earlier than midnight")
	assert.LessOrEqual(t, wait, boundary.Sub(before)+time.Second, "midnight, rounded up")
	require.NotNil(t, quota)
	assert.Equal(t, "daily", quota.GetViolations()[0].GetSubject())
	secs := strconv.FormatInt(int64(wait/time.Second), 10)
	assert.Equal(t, []string{secs}, header.Get("retry-after"))
	assert.Equal(t, []string{`"daily";r=0;t=` + secs}, header.Get("ratelimit"))
}
