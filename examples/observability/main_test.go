package main

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/exampletest"
)

// /metrics serves the four metrics with the policy and outcome labels of
// what the API did: allowed, denied, dry-run denied, then, while Redis is
// down, decided by the local fallback, and back to Redis once it returns.
func TestMetrics(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	client, err := core.New(rdb)
	require.NoError(t, err)
	h, err := newHandler(client, prom.NewRegistry(), 1)
	require.NoError(t, err)

	do := func(method, path, ip string) int {
		t.Helper()
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = ip + ":40000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	codes := func(n int, method, path, ip string) []int {
		t.Helper()
		var c []int
		for range n {
			c = append(c, do(method, path, ip))
		}
		return c
	}
	ok, limited := http.StatusOK, http.StatusTooManyRequests
	// One client per policy, each from its own address.
	assert.Equal(t, []int{ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, limited}, codes(11, "GET", "/", "192.0.2.1"), "global: 10 per 10 s")
	assert.Equal(t, []int{ok, ok, ok, limited}, codes(4, "POST", "/login", "192.0.2.2"), "login: 3 per minute")
	assert.Equal(t, []int{ok, ok, ok}, codes(3, "GET", "/search", "192.0.2.3"), "search runs dry: served")

	m := scrape(t, h)
	for sample, want := range map[string]float64{
		`redlimit_decisions_total{outcome="allowed",policy="global"}`:        17,
		`redlimit_decisions_total{outcome="denied",policy="global"}`:         1,
		`redlimit_decisions_total{outcome="allowed",policy="login"}`:         3,
		`redlimit_decisions_total{outcome="denied",policy="login"}`:          1,
		`redlimit_decisions_total{outcome="allowed",policy="search"}`:        2,
		`redlimit_decisions_total{outcome="dry_run_denied",policy="search"}`: 1,
		`redlimit_decisions_total{outcome="denied",policy="search"}`:         0,
		`redlimit_decision_duration_seconds_count{policy="global"}`:          18,
		`redlimit_decision_duration_seconds_count{policy="login"}`:           4,
		`redlimit_redis_errors_total{policy="global"}`:                       0,
		`redlimit_fallback_active{policy="global"}`:                          0,
		`redlimit_fallback_active{policy="login"}`:                           0,
	} {
		got, found := m[sample]
		if assert.True(t, found, "%s not served", sample) {
			assert.Equal(t, want, got, sample)
		}
	}
	assert.Contains(t, m, `redlimit_decision_duration_seconds_bucket{policy="global",le="0.125"}`)

	// Redis goes away: the global policy decides in memory (the default
	// failure policy), and says so.
	// The first failed round trip, then the probe made at once, tell the
	// Client that Redis fails; from then on the fallback decides.
	// Until it knows, each request is decided in memory too, at the
	// process's share of the rate: one request per address stays within
	// it, however long the Client takes to know.
	mr.Close()
	n := 0
	assert.Eventually(t, func() bool {
		n++
		assert.Equal(t, ok, do("GET", "/", "198.51.100."+strconv.Itoa(n%250+1)))
		return scrape(t, h)[`redlimit_fallback_active{policy="global"}`] == 1
	}, 5*time.Second, 10*time.Millisecond, "the fallback starts")
	m = scrape(t, h)
	assert.GreaterOrEqual(t, m[`redlimit_redis_errors_total{policy="global"}`], 1.0)
	assert.GreaterOrEqual(t, m[`redlimit_decisions_total{outcome="fallback_allowed",policy="global"}`], 1.0)

	// Redis comes back: a request a second asks it, and the first answer
	// hands the decisions back.
	require.NoError(t, mr.Restart())
	assert.Eventually(t, func() bool {
		do("GET", "/", "192.0.2.5")
		return scrape(t, h)[`redlimit_fallback_active{policy="global"}`] == 0
	}, 5*time.Second, 50*time.Millisecond, "the fallback is still active")
}

// scrape gets /metrics from h and returns its redlimit samples by name and
// labels, as written: `name{label="value",...}`.
func scrape(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	samples := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "redlimit_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		samples[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return samples
}

// The server has the timeouts of a server open to clients, and closes a
// keep-alive connection left idle for its IdleTimeout (shortened here).
func TestServer(t *testing.T) {
	h, err := newHandler(exampletest.Client(t), prom.NewRegistry(), 1)
	require.NoError(t, err)
	srv := newServer("127.0.0.1:0", h)
	assert.Positive(t, srv.ReadHeaderTimeout)
	assert.Positive(t, srv.ReadTimeout)
	assert.Positive(t, srv.WriteTimeout)
	assert.Positive(t, srv.IdleTimeout)

	srv.IdleTimeout = 200 * time.Millisecond
	exampletest.IdleClosed(t, exampletest.Serve(t, srv), srv.IdleTimeout)
}
