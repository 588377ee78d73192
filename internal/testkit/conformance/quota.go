package conformance

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/stall"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
)

// redisNow returns rdb's TIME.
func redisNow(t *testing.T, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

// dayQuota returns a Day quota of limit in a time zone whose next
// midnight, by rdb's clock, is about 12 hours away (so that no case sees
// it come), and that midnight.
func dayQuota(t *testing.T, rdb redis.UniversalClient, limit int64) (*core.Quota, time.Time) {
	t.Helper()
	now := redisNow(t, rdb)
	boundary := now.Add(12 * time.Hour).Truncate(time.Second)
	off := int((-boundary.Unix()%86_400 + 86_400) % 86_400) // boundary is 00:00 there
	if off > 12*3600 {
		off -= 86_400
	}
	return &core.Quota{Limit: limit, Period: core.Day, Location: time.FixedZone("conformance", off)}, boundary
}

// toBoundary checks that the header h of r is the time from Redis's clock
// to boundary in whole seconds, rounded up: never earlier than from after,
// when r had been answered, and no later than from before, when it was
// sent, rounded up. It returns the header's value.
func toBoundary(t *testing.T, r response, h string, boundary, before, after time.Time) string {
	t.Helper()
	v := r.header.Get(h)
	n, err := strconv.Atoi(v)
	if !assert.NoError(t, err, "%s: %q", h, v) {
		return v
	}
	got := time.Duration(n) * time.Second
	assert.GreaterOrEqual(t, got, boundary.Sub(after), "%s %s: never earlier than the boundary", h, v)
	assert.LessOrEqual(t, got, boundary.Sub(before)+time.Second, "%s %s: the boundary, rounded up", h, v)
	return v
}

// quotaLeft returns what the period has left of quota q on the limiter of
// policy name and key, on ap's Client.
func quotaLeft(t *testing.T, ap App, q *core.Quota, name, key string) int64 {
	t.Helper()
	l := ap.Client.Limiter(keyfunc.Escape(name)+":"+keyfunc.Escape(key), core.WithQuota(*q))
	n, err := l.AvailablePermits(context.Background())
	require.NoError(t, err)
	return n
}

// runQuota is the table's part for quotas per calendar period.
func runQuota(t *testing.T, a Adapter, b backend, app appFunc, failing failingFunc, stalls *stall.Monitor) {
	peer := a.Peer.String()

	t.Run("quota: N per day then 429 with the boundary in Retry-After and w", func(t *testing.T) {
		t.Parallel()
		q, boundary := dayQuota(t, b.rdb, 3)
		_, c := oneLimit(app, t, Limit{Name: "daily", Quota: q})
		before := redisNow(t, b.rdb)
		for i, want := range []string{"2", "1", "0"} {
			r := c.get("/a")
			after := redisNow(t, b.rdb)
			require.Equal(t, http.StatusOK, r.status, "request %d", i+1)
			assert.Equal(t, `"daily";q=3;w=86400`, r.header.Get("RateLimit-Policy"))
			reset := toBoundary(t, r, "X-RateLimit-Reset", boundary, before, after)
			assert.Equal(t, `"daily";r=`+want+`;t=`+reset, r.header.Get("RateLimit"), "t runs to the end of the day")
			assert.Equal(t, "3", r.header.Get("X-RateLimit-Limit"))
			assert.Equal(t, want, r.header.Get("X-RateLimit-Remaining"))
			assert.Empty(t, r.header.Get("Retry-After"))
			assert.Equal(t, "r="+want, r.header.Get(HeaderResult))
		}
		// The second refusal may be the denial cache's, from the first's
		// reply: its time runs from when that reply came, which Redis's
		// decision preceded, so both are bounded from before the first.
		before = redisNow(t, b.rdb)
		for range 2 {
			r := c.get("/a")
			after := redisNow(t, b.rdb)
			require.Equal(t, http.StatusTooManyRequests, r.status)
			retry := toBoundary(t, r, "Retry-After", boundary, before, after)
			assert.Equal(t, retry, r.header.Get("X-RateLimit-Reset"))
			assert.Equal(t, `"daily";q=3;w=86400`, r.header.Get("RateLimit-Policy"))
			assert.Equal(t, `"daily";r=0;t=`+retry, r.header.Get("RateLimit"))
			assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
			assert.Equal(t, a.ProblemContentType, r.header.Get("Content-Type"))
			assert.Contains(t, r.body, "for the current day")
		}
	})

	t.Run("quota stacked with a rate: a refusal by either takes nothing from the other", func(t *testing.T) {
		t.Parallel()
		daily, _ := dayQuota(t, b.rdb, 2)
		weekly := &core.Quota{Limit: 5, Period: core.Week}
		ap, c := app(t, nil,
			Route{Path: "/rate-first", Limits: []Limit{{Name: "burst", Rate: core.PerMinute(3)}, {Name: "daily", Quota: daily}}},
			Route{Path: "/quota-first", Limits: []Limit{{Name: "weekly", Quota: weekly}, {Name: "slow", Rate: core.PerMinute(2)}}})
		assert.Equal(t, []int{200, 200, 429, 429}, c.statuses(4, "/rate-first"), "the quota refuses")
		assert.Equal(t, int64(2), used(t, b, ap, "burst", peer), "the rate kept only the requests served")
		assert.Zero(t, quotaLeft(t, ap, daily, "daily", peer))
		r := c.get("/rate-first")
		assert.Equal(t, "2", r.header.Get("X-RateLimit-Limit"), "the headers of the quota that refused")
		assert.Equal(t, `"burst";q=3;w=60, "daily";q=2;w=86400`, r.header.Get("RateLimit-Policy"))

		assert.Equal(t, []int{200, 200, 429, 429}, c.statuses(4, "/quota-first"), "the rate refuses")
		assert.Equal(t, int64(3), quotaLeft(t, ap, weekly, "weekly", peer), "the quota kept only the requests served")
	})

	// Not parallel: the failing Redis of n 0 is its own while it runs.
	t.Run("quota with Redis stopped: the process's share of what the day has left", func(t *testing.T) {
		obs := &Recorder{}
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		q, boundary := dayQuota(t, b.rdb, 6)
		ap, c, s := failing(t, 0, Limit{Name: "downq", Quota: q, Keys: user, Failure: FailLocal, Instances: 2, Observer: obs})
		assert.Equal(t, []int{200, 200}, c.statuses(2, "/a", HeaderUser, "alice"), "Redis decides: 4 left")
		require.NoError(t, s.Stop())
		var got []int
		for i := range 3 {
			r := c.get("/a", HeaderUser, "alice")
			got = append(got, r.status)
			inTime(t, stalls, r, noHangQuota, 0)
			if i == 2 {
				retry, err := strconv.Atoi(r.header.Get("Retry-After"))
				require.NoError(t, err)
				assert.InDelta(t, time.Until(boundary).Seconds(), retry, 10, "until midnight")
			}
		}
		assert.Equal(t, []int{200, 200, 429}, got, "ceil(4 left / 2 instances)")
		assert.Equal(t, []int{200, 200, 200, 429}, c.statuses(4, "/a", HeaderUser, "bob"), "no decision known: ceil(6 / 2)")
		assert.Equal(t, 5, obs.Count(observe.FallbackAllowed))
		assert.Equal(t, 2, obs.Count(observe.FallbackDenied))

		require.NoError(t, s.Restart()) // empty
		require.Eventually(t, func() bool {
			c.get("/a", HeaderUser, "carol")
			return obs.Last().Outcome == observe.Allowed
		}, 10*time.Second, 20*time.Millisecond, "Redis decides again")
		require.Eventually(t, func() bool {
			return quotaLeft(t, ap, q, "downq", "alice") == 4 && quotaLeft(t, ap, q, "downq", "bob") == 3
		}, 10*time.Second, 20*time.Millisecond, "the local grants are counted in the Redis restarted empty")
		require.Eventually(t, func() bool { return len(obs.Transitions()) == 2 }, 10*time.Second, 20*time.Millisecond)
		assert.Equal(t, []bool{true, false}, obs.Transitions())
	})
}

// noHangQuota bounds the answer of a request while Redis is down, as
// noHang does in the table: four times failingTimeout.
const noHangQuota = 4 * failingTimeout
