package conformance

import (
	"context"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/keyfunc"
)

// HeaderUserHex carries a user id hex-encoded, so that ids with control
// characters, which HTTP cannot carry in a header, reach the application as
// an authentication middleware would set them.
const HeaderUserHex = "X-User-Hex"

// UserOf returns the user a pre-middleware stores: X-User-Hex decoded, else
// X-User.
func UserOf(header func(string) string) string {
	if h := header(HeaderUserHex); h != "" {
		if b, err := hex.DecodeString(h); err == nil {
			return string(b)
		}
	}
	return header(HeaderUser)
}

// Statuses a hostile request may get: served, limited, or refused by the
// framework itself as too large or malformed (fasthttp answers 431 to
// headers beyond its read buffer). Never a 5xx, never a hang.
var hostileOK = []int{http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest, http.StatusRequestHeaderFieldsTooLarge}

// RunHostile runs the hostile-input table for a: oversized and malformed
// headers, forged forwarding headers, unicode and control characters in
// user ids and API keys, and costs and rates at the int64 edges. Every
// request gets a clear response, and no hostile request touches another
// client's limiter.
func RunHostile(t *testing.T, a Adapter) {
	rdb := redistest.Shared(t).Client(t)

	serve := func(t *testing.T, global []Limit, routes ...Route) caller {
		c, err := core.New(rdb, core.WithKeyPrefix(t.Name()+"."+strconv.FormatUint(rand.Uint64(), 36)+":"))
		require.NoError(t, err)
		ap := App{Client: c, Global: patient(global, sharedTimeout), Routes: patientRoutes(routes), Errors: make(chan error, 1000)}
		return caller{t: t, do: a.Serve(t, ap)}
	}
	user := keyfunc.User(a.UserKey)
	trusted := keyfunc.IP(keyfunc.TrustProxies(netip.PrefixFrom(a.Peer, a.Peer.BitLen())))
	limits := []Route{
		{Path: "/user", Limits: []Limit{{Name: "user", Rate: core.PerMinute(3), Keys: []keyfunc.KeyFunc{user}}}},
		{Path: "/key", Limits: []Limit{{Name: "key", Rate: core.PerMinute(3), Keys: []keyfunc.KeyFunc{keyfunc.APIKey("X-API-Key")}}}},
		{Path: "/proxy", Limits: []Limit{{Name: "proxy", Rate: core.PerMinute(3), Keys: []keyfunc.KeyFunc{trusted}}}},
	}

	// bystanders are clients that take no part: each hostile case must
	// leave their limiters as they were.
	type bystander struct {
		path   string
		header []string
	}
	bystanders := []bystander{
		{"/user", []string{HeaderUser, "bystander"}},
		{"/key", []string{"X-API-Key", "bystander-key"}},
		{"/proxy", []string{"X-Forwarded-For", "198.51.100.200"}},
	}
	remaining := func(c caller) []string {
		var out []string
		for _, b := range bystanders {
			out = append(out, c.get(b.path, b.header...).header.Get("X-RateLimit-Remaining"))
		}
		return out
	}

	big := strings.Repeat("a", 64<<10)
	manyHops := strings.TrimSuffix(strings.Repeat("203.0.113.1, ", 1000), ", ")
	cases := []struct {
		name   string
		path   string
		header []string
	}{
		{"64 KiB X-Forwarded-For", "/proxy", []string{"X-Forwarded-For", big}},
		{"1 000 X-Forwarded-For hops", "/proxy", []string{"X-Forwarded-For", manyHops}},
		{"garbage X-Forwarded-For", "/proxy", []string{"X-Forwarded-For", "1.2.3.4,,, [::1, not-an-ip, 999.1.1.1"}},
		{"forged Forwarded", "/proxy", []string{"Forwarded", `for="[::1"; for=unknown, for=_hidden;proto=http`}},
		{"X-Forwarded-For at an unproxied route", "/user", []string{HeaderUser, "eve", "X-Forwarded-For", "198.51.100.200"}},
		{"64 KiB user id", "/user", []string{HeaderUser, big}},
		{"unicode user id", "/user", []string{HeaderUser, "üser-用户-🙂"}},
		{"control characters in a user id", "/user", []string{HeaderUserHex, hex.EncodeToString([]byte("a\x00b\r\nc\x1b[0m\x7f"))}},
		{"separators in a user id", "/user", []string{HeaderUser, "bystander:{x}*"}},
		{"a user id like another's escaped form", "/user", []string{HeaderUser, "bystander%3A"}},
		{"64 KiB API key", "/key", []string{"X-API-Key", big}},
		{"unicode API key", "/key", []string{"X-API-Key", "ключ-🔑\tkey"}},
		{"empty API key", "/key", []string{"X-API-Key", ""}},
	}

	t.Run("hostile headers get a clear answer and touch no one else", func(t *testing.T) {
		t.Parallel()
		c := serve(t, nil, limits...)
		// Spend one permit of each bystander, then check nothing moves.
		before := remaining(c)
		require.Equal(t, []string{"2", "2", "2"}, before)
		for _, tc := range cases {
			for i := 0; i < 5; i++ { // past the limit of 3
				r := c.get(tc.path, tc.header...)
				assert.Contains(t, hostileOK, r.status, "%s: status %d, body %q", tc.name, r.status, r.body)
				assert.Less(t, r.elapsed, 2*time.Second, tc.name)
			}
		}
		after := remaining(c)
		assert.Equal(t, []string{"1", "1", "1"}, after, "each bystander lost exactly its own second permit")
	})

	t.Run("distinct hostile identities get distinct limiters", func(t *testing.T) {
		t.Parallel()
		c := serve(t, nil, limits...)
		ids := []string{"a\x00", "a\x00\x00", "a\r\n", "a\n\r", "ü", "u\u0308", "a:b", "a%3Ab", "{a}", "a*", strings.Repeat("x", 65), strings.Repeat("x", 66)}
		for _, id := range ids {
			h := []string{HeaderUserHex, hex.EncodeToString([]byte(id))}
			assert.Equal(t, []int{200, 200, 200, 429}, c.statuses(4, "/user", h...), "user %q", id)
		}
	})

	t.Run("costs and rates at the int64 edges", func(t *testing.T) {
		t.Parallel()
		// Impossible options make every request fail loudly (500), never
		// serve it unlimited and never panic.
		for _, l := range []Limit{
			{Name: "cost-max", Rate: core.PerMinute(10), Cost: math.MaxInt64},
			{Name: "cost-min", Rate: core.PerMinute(10), Cost: math.MinInt64},
			{Name: "rate-max", Rate: core.Rate{Permits: math.MaxInt64, Interval: time.Minute}},
			{Name: "interval-ns", Rate: core.Rate{Permits: 10, Interval: math.MaxInt64}},
			{Name: "wait-min", Rate: core.PerMinute(10), MaxWait: math.MinInt64},
		} {
			c := serve(t, []Limit{l}, Route{Path: "/a"})
			r := c.get("/a")
			assert.Equal(t, http.StatusInternalServerError, r.status, l.Name)
			assert.NotContains(t, r.body, "permits", "%s: no error text in the body", l.Name)
		}
		// The largest valid values work.
		c := serve(t, []Limit{{Name: "edge", Rate: core.Rate{Permits: core.MaxPermits, Interval: 100 * 365 * 24 * time.Hour}, Cost: core.MaxPermits}},
			Route{Path: "/a"})
		r := c.get("/a")
		require.Equal(t, http.StatusOK, r.status, r.body)
		assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
		r = c.get("/a")
		assert.Equal(t, http.StatusTooManyRequests, r.status)
		retry, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
		require.NoError(t, err)
		assert.Greater(t, retry, int64(99*365*24*3600), "a century's window, in seconds")
		// A huge maximum wait is still bounded by the request's deadline.
		c = serve(t, []Limit{{Name: "wait-max", Rate: core.PerMinute(1), MaxWait: math.MaxInt64}}, Route{Path: "/a"})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		r = c.get("/a", HeaderDeadline, "200")
		assert.Equal(t, http.StatusTooManyRequests, r.status)
		assert.Less(t, r.elapsed, time.Second)
	})
}

// ChurnMemory drives n distinct user keys through do (an adapter serving
// App) and reports whether every key expired after the keepAlive, and Redis
// memory came back to its baseline. It returns the keys per second reached.
func ChurnMemory(t *testing.T, a Adapter, n, workers int) float64 {
	redistest.Need(t)
	s, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	rdb := s.Client(t)
	c, err := core.New(rdb)
	require.NoError(t, err)
	window := 200 * time.Millisecond // keepAlive: two windows
	ap := App{Client: c, Routes: []Route{{Path: "/user", Limits: []Limit{{
		Name: "churn", Rate: core.Rate{Permits: 5, Interval: window}, Timeout: sharedTimeout, Keys: []keyfunc.KeyFunc{keyfunc.User(a.UserKey)},
	}}}}, Errors: make(chan error, 10)}
	cl := caller{t: t, do: a.Serve(t, ap)}
	cl.get("/user", HeaderUser, "warm-up") // connections, scripts
	require.Eventually(t, func() bool { return dbsize(t, rdb) == 0 }, 2*time.Second, 20*time.Millisecond)
	base := usedMemory(t, rdb)

	start := time.Now()
	done := make(chan struct{})
	statuses := make([][]int, workers)
	for w := 0; w < workers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := w; i < n; i += workers {
				statuses[w] = append(statuses[w], cl.get("/user", HeaderUser, "u"+strconv.Itoa(i)).status)
			}
		}()
	}
	for range workers {
		<-done
	}
	rate := float64(n) / time.Since(start).Seconds()
	for _, st := range statuses {
		assert.Equal(t, repeat(http.StatusOK, len(st)), st, "every new user is served")
	}
	peak := dbsize(t, rdb)
	assert.Greater(t, peak, int64(0))
	require.Eventually(t, func() bool { return dbsize(t, rdb) == 0 }, 3*time.Second, 50*time.Millisecond,
		"every key expires after the keepAlive")
	after := usedMemory(t, rdb)
	assert.InDelta(t, base, after, 256<<10, "memory back to its baseline (%d B before, %d B after)", base, after)
	t.Logf("%d keys at %.0f keys/s; %d Redis keys at the end of the burst, 0 after %v; used_memory %d B before, %d B after",
		n, rate, peak, 2*window, base, after)
	return rate
}

func dbsize(t *testing.T, rdb *redis.Client) int64 {
	n, err := rdb.DBSize(context.Background()).Result()
	require.NoError(t, err)
	return n
}

func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	info, err := rdb.InfoMap(context.Background(), "memory").Result()
	require.NoError(t, err)
	n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	require.NoError(t, err)
	return n
}
