package conformance

import (
	"context"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/internal/testkit/stall"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
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

// hostileRequests is how many times each hostile request is sent: past
// the limit of 3 of the hostile routes.
const hostileRequests = 5

// hostileCase is one hostile request, sent hostileRequests times, and the
// exact outcome of each.
type hostileCase struct {
	name   string
	path   string
	header []string
	// noKey: the key function finds no key in the request
	// (keyfunc.ErrNoKey), so the request is limited by its client IP, in
	// the namespace of requests without a key. Either way each request is
	// decided: 3 served, then 429s.
	noKey bool
}

// want returns the statuses the case's requests must get from a, and
// whether they are decided by Redis.
func (tc hostileCase) want(a Adapter) (statuses []int, decided bool) {
	if st, ok := a.HostileRefused[tc.name]; ok {
		// The framework answers before any middleware runs.
		return repeat(st, hostileRequests), false
	}
	return []int{200, 200, 200, 429, 429}, true
}

// drain returns the errors an App's error handlers have reported so far.
func drain(errs chan error) []error {
	var out []error
	for {
		select {
		case err := <-errs:
			out = append(out, err)
		default:
			return out
		}
	}
}

// RunHostile runs the hostile-input table for a: oversized and malformed
// headers, forged forwarding headers, unicode and control characters in
// user ids and API keys, and costs and rates at the int64 edges. Each
// hostile request gets exactly the answer its case gives (decided: 3
// served, then 429, by its key or, with no key, by its client IP; or the
// framework's own status where a.HostileRefused says the framework refuses
// it), the error handler sees no error, and no hostile request touches
// another client's limiter.
func RunHostile(t *testing.T, a Adapter) {
	rdb := redistest.Shared(t).Client(t)
	stalls := stall.Watch(t)

	serve := func(t *testing.T, global []Limit, routes ...Route) (App, caller) {
		prefix := t.Name() + "." + strconv.FormatUint(rand.Uint64(), 36) + ":"
		c, err := core.New(rdb, core.WithKeyPrefix(prefix))
		require.NoError(t, err)
		ap := App{Client: c, Prefix: prefix, Global: patient(global, sharedTimeout), Routes: patientRoutes(routes), Errors: make(chan error, 1000), adapter: &a, built: &built{}}
		return ap, caller{t: t, do: a.Serve(t, ap)}
	}
	user := keyfunc.User(a.UserKey)
	trusted := keyfunc.IP(keyfunc.TrustProxies(netip.PrefixFrom(a.Peer, a.Peer.BitLen())))
	// Every limit reports its errors (ErrorObserve), of which there must be
	// none.
	limits := []Route{
		{Path: "/user", Limits: []Limit{{Name: "user", Rate: core.PerMinute(3), Keys: []keyfunc.KeyFunc{user}, OnError: ErrorObserve}}},
		{Path: "/key", Limits: []Limit{{Name: "key", Rate: core.PerMinute(3), Keys: []keyfunc.KeyFunc{keyfunc.APIKey("X-API-Key")}, OnError: ErrorObserve}}},
		{Path: "/proxy", Limits: []Limit{{Name: "proxy", Rate: core.PerMinute(3), Keys: []keyfunc.KeyFunc{trusted}, OnError: ErrorObserve}}},
		{Path: "/ip", Limits: []Limit{{Name: "ip", Rate: core.PerMinute(3), Keys: []keyfunc.KeyFunc{keyfunc.IP()}, OnError: ErrorObserve}}},
	}

	// bystanders are clients that take no part: each hostile case must
	// leave their limiters as they were. (The client of /ip is the peer,
	// the same for every test request: it has no bystander.)
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
	cases := []hostileCase{
		// From a trusted proxy (/proxy): the rightmost untrusted entry is
		// the client; one that cannot be parsed is no key.
		{name: "64 KiB X-Forwarded-For", path: "/proxy", header: []string{"X-Forwarded-For", big}, noKey: true},
		{name: "1 000 X-Forwarded-For hops", path: "/proxy", header: []string{"X-Forwarded-For", manyHops}},
		{name: "garbage X-Forwarded-For", path: "/proxy", header: []string{"X-Forwarded-For", "1.2.3.4,,, [::1, not-an-ip, 999.1.1.1"}, noKey: true},
		// The key reads X-Forwarded-For: a Forwarded header is not read,
		// and the client is the peer.
		{name: "forged Forwarded", path: "/proxy", header: []string{"Forwarded", `for="[::1"; for=unknown, for=_hidden;proto=http`}},
		// From a peer that is not trusted (/ip), forwarding headers are
		// ignored: the client is the peer.
		{name: "64 KiB X-Forwarded-For from an untrusted peer", path: "/ip", header: []string{"X-Forwarded-For", big}},
		{name: "garbage X-Forwarded-For from an untrusted peer", path: "/ip", header: []string{"X-Forwarded-For", "1.2.3.4,,, [::1, not-an-ip, 999.1.1.1"}},
		{name: "X-Forwarded-For at a route keyed by user", path: "/user", header: []string{HeaderUser, "eve", "X-Forwarded-For", "198.51.100.200"}},
		{name: "64 KiB user id", path: "/user", header: []string{HeaderUser, big}},
		{name: "unicode user id", path: "/user", header: []string{HeaderUser, "üser-用户-🙂"}},
		{name: "control characters in a user id", path: "/user", header: []string{HeaderUserHex, hex.EncodeToString([]byte("a\x00b\r\nc\x1b[0m\x7f"))}},
		{name: "separators in a user id", path: "/user", header: []string{HeaderUser, "bystander:{x}*"}},
		{name: "a user id like another's escaped form", path: "/user", header: []string{HeaderUser, "bystander%3A"}},
		{name: "64 KiB API key", path: "/key", header: []string{"X-API-Key", big}},
		{name: "unicode API key", path: "/key", header: []string{"X-API-Key", "ключ-🔑\tkey"}},
		{name: "empty API key", path: "/key", header: []string{"X-API-Key", ""}, noKey: true},
	}
	for name := range a.HostileRefused {
		require.True(t, slices.ContainsFunc(cases, func(tc hostileCase) bool { return tc.name == name }),
			"%s: HostileRefused names no case %q", a.Name, name)
	}

	t.Run("hostile headers get their exact answer and touch no one else", func(t *testing.T) {
		t.Parallel()
		var slowest time.Duration
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ap, c := serve(t, nil, limits...)
				// Spend one permit of each bystander, then check that the
				// case moves none of them.
				require.Equal(t, []string{"2", "2", "2"}, remaining(c))
				wantStatus, wantDecided := tc.want(a)
				var got []int
				for i := range hostileRequests {
					r := c.get(tc.path, tc.header...)
					got = append(got, r.status)
					slowest = max(slowest, r.elapsed)
					assert.Equal(t, wantDecided, r.header.Get("RateLimit") != "",
						"request %d: decided by Redis (rate limit headers); status %d, body %q", i+1, r.status, r.body)
					// No hang: the round-trip timeout of the table is
					// sharedTimeout, and a fail-open answer needs no round
					// trip (plus the test process's stalls: see inTime).
					inTime(t, stalls, r, sharedTimeout, 0, "request %d", i+1)
				}
				assert.Equal(t, wantStatus, got, "statuses")
				assert.Equal(t, []string{"1", "1", "1"}, remaining(c), "each bystander lost exactly its own second permit")
				assert.Empty(t, drain(ap.Errors), "errors reported to the error handler")
				if tc.noKey && wantDecided {
					// Limited in the namespace of requests without a key.
					ks, err := rdb.Keys(context.Background(), ap.Prefix+"*::ip:*").Result()
					require.NoError(t, err)
					assert.Len(t, ks, 1, "the limiter of the client IP, apart from every key")
				}
			})
		}
		t.Logf("slowest hostile request: %v", slowest.Round(time.Millisecond))
	})

	t.Run("distinct hostile identities get distinct limiters", func(t *testing.T) {
		t.Parallel()
		ap, c := serve(t, nil, limits...)
		ids := []string{"a\x00", "a\x00\x00", "a\r\n", "a\n\r", "ü", "u\u0308", "a:b", "a%3Ab", "{a}", "a*", strings.Repeat("x", 65), strings.Repeat("x", 66)}
		for _, id := range ids {
			h := []string{HeaderUserHex, hex.EncodeToString([]byte(id))}
			assert.Equal(t, []int{200, 200, 200, 429}, c.statuses(4, "/user", h...), "user %q", id)
		}
		assert.Empty(t, drain(ap.Errors), "errors reported to the error handler")
	})

	t.Run("costs and rates at the int64 edges", func(t *testing.T) {
		t.Parallel()
		// Impossible options make policy.New fail with the typed error,
		// naming the option: never a policy that serves unlimited.
		ap, _ := serve(t, nil, Route{Path: "/a"})
		for _, tc := range []struct {
			name string
			r    core.Rate
			opt  policy.Option
			err  error
			msg  string
		}{
			{"cost-max", core.PerMinute(10), policy.WithCost(math.MaxInt64), core.ErrInvalidPermits, "WithCost(9223372036854775807): "},
			{"cost-min", core.PerMinute(10), policy.WithCost(math.MinInt64), core.ErrInvalidPermits, "WithCost(-9223372036854775808): "},
			{"rate-max", core.Rate{Permits: math.MaxInt64, Interval: time.Minute}, nil, core.ErrInvalidRate, "rate 9223372036854775807 per 1m0s"},
			{"interval-ns", core.Rate{Permits: 10, Interval: math.MaxInt64}, nil, core.ErrInvalidRate, "rate 10 per 2562047h47m16.854775807s"},
			{"wait-min", core.PerMinute(10), policy.WithWait(math.MinInt64), core.ErrInvalidOption, "WithWait(-2562047h47m16.854775808s): "},
		} {
			_, err := policy.New(ap.Client, tc.name, tc.r, tc.opt)
			assert.ErrorIs(t, err, tc.err, tc.name)
			assert.ErrorContains(t, err, `policy "`+tc.name+`": `+tc.msg)
		}
		// The largest valid values work.
		ap, c := serve(t, []Limit{{Name: "edge", Rate: core.Rate{Permits: core.MaxPermits, Interval: 100 * 365 * 24 * time.Hour}, Cost: core.MaxPermits, OnError: ErrorObserve}},
			Route{Path: "/a"})
		r := c.get("/a")
		require.Equal(t, http.StatusOK, r.status, r.body)
		assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
		r = c.get("/a")
		assert.Equal(t, http.StatusTooManyRequests, r.status)
		retry, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
		require.NoError(t, err)
		assert.Greater(t, retry, int64(99*365*24*3600), "a century's window, in seconds")
		t.Logf("Retry-After at the largest valid rate: %d s", retry)
		assert.Empty(t, drain(ap.Errors), "errors reported to the error handler")
		// A huge maximum wait is still bounded by the request's deadline:
		// the wait (a minute) cannot fit in its 3 s, so the request is
		// rejected at once, long before the deadline.
		ap, c = serve(t, []Limit{{Name: "wait-max", Rate: core.PerMinute(1), MaxWait: math.MaxInt64, OnError: ErrorObserve}}, Route{Path: "/a"})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		r = c.get("/a", HeaderDeadline, "3000")
		assert.Equal(t, http.StatusTooManyRequests, r.status)
		inTime(t, stalls, r, 500*time.Millisecond, 3*time.Second, "rejected at once, not at the deadline")
		t.Logf("wait that cannot fit in a 3 s deadline: rejected after %v", r.elapsed.Round(time.Millisecond))
		assert.Empty(t, drain(ap.Errors), "errors reported to the error handler")
	})
}

// churnReclaimed bounds how long after the last request of the churn Redis
// may take to reclaim every key, expired by then (see ChurnMemory): its
// active expiry runs ten times a second (hz 10) and takes more of the
// expired keys each cycle while many are left; on an idle machine, every
// key is gone within 700 ms. The bound only says that Redis reclaims them
// at all: when each expires is judged by Redis's clock.
const churnReclaimed = 10 * time.Second

// churnMemoryDelta bounds how far Redis used_memory may end from its
// baseline once every key is gone: allocator fragmentation and client
// buffers move it by tens of kB; a leak of the churn's keys (three per
// user, about 300 B each) would be megabytes.
const churnMemoryDelta = 256 << 10

// ChurnMemory drives n distinct user keys through do (an adapter serving
// App) and checks that every key expires after the keepAlive (two
// windows): by Redis's clock, no key left after the last request expires
// later than the keepAlive after it (PEXPIRETIME against Redis's TIME, so
// that a loaded machine, slow to poll or to reclaim, cannot fail it); all
// of them are gone within churnReclaimed, and Redis memory is back within
// churnMemoryDelta of its baseline. It logs the figures measured, among
// them when the last key was gone, and returns the keys per second
// reached.
func ChurnMemory(t *testing.T, a Adapter, n, workers int) float64 {
	rdb := redistest.Own(t)
	c, err := core.New(rdb)
	require.NoError(t, err)
	window := 200 * time.Millisecond
	rate := core.Rate{Permits: 5, Interval: window}
	keepAlive := 2 * window // a code-defined rate's keys live two windows after their last write
	ap := App{Client: c, Routes: []Route{{Path: "/user", Limits: []Limit{{
		Name: "churn", Rate: rate, Timeout: sharedTimeout, Keys: []keyfunc.KeyFunc{keyfunc.User(a.UserKey)},
	}}}}, Errors: make(chan error, 10), adapter: &a, built: &built{}}
	cl := caller{t: t, do: a.Serve(t, ap)}
	cl.get("/user", HeaderUser, "warm-up") // connections, scripts
	// The warm-up's keys expire after the keepAlive; waiting for them is
	// no check, but a clean baseline.
	require.Eventually(t, func() bool { return dbsize(t, rdb) == 0 }, churnReclaimed, 20*time.Millisecond)
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
	end := time.Now()
	perSecond := float64(n) / end.Sub(start).Seconds()
	// A key written now carries the keepAlive as its TTL.
	cl.get("/user", HeaderUser, "ttl-probe")
	end = time.Now() // the last request
	// Redis's clock after every write of the churn.
	lastAt, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	ttl, err := rdb.PTTL(context.Background(), "churn:ttl-probe").Result()
	require.NoError(t, err)
	assert.True(t, ttl > 0 && ttl <= keepAlive, "TTL of a new client's key: %v, want at most the keepAlive %v", ttl, keepAlive)
	peak := dbsize(t, rdb)
	assert.Greater(t, peak, int64(0))
	for _, st := range statuses {
		assert.Equal(t, repeat(http.StatusOK, len(st)), st, "every new user is served")
	}
	left, late := expiriesAfter(t, rdb, lastAt.Add(keepAlive))
	assert.Empty(t, late, "keys left after the last request that expire more than the keepAlive (%v) after it, by Redis's clock, of %d left",
		keepAlive, left)

	var gone time.Duration
	require.Eventually(t, func() bool {
		if dbsize(t, rdb) != 0 {
			return false
		}
		gone = time.Since(end)
		return true
	}, churnReclaimed, 10*time.Millisecond, "every key expires after the keepAlive, and Redis reclaims it")
	after := usedMemory(t, rdb)
	assert.InDelta(t, base, after, churnMemoryDelta, "memory back to its baseline (%d B before, %d B after)", base, after)
	t.Logf("%d new users at %.0f users/s; %d Redis keys at the end of the burst, %d left when their expiry times were read, "+
		"none expiring later than the keepAlive (%v) after the last request; the last key gone %v after it "+
		"(bound %v); used_memory %d B before, %d B after (%+d B, bound ±%d B)",
		n, perSecond, peak, left, keepAlive, gone.Round(time.Millisecond), churnReclaimed, base, after, after-base, churnMemoryDelta)
	return perSecond
}

// expiriesAfter reads the expiry time (PEXPIRETIME, by Redis's clock) of
// every key in rdb, and returns how many it found and up to 10 of those
// that expire after by, or never.
func expiriesAfter(t *testing.T, rdb *redis.Client, by time.Time) (int, []string) {
	t.Helper()
	ctx := context.Background()
	var (
		n    int
		late []string
	)
	it := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	var keys []string
	flush := func() {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Do(ctx, "pexpiretime", k)
			}
			return nil
		})
		require.NoError(t, err)
		for i, c := range cmds {
			at, err := c.(*redis.Cmd).Int64()
			require.NoError(t, err)
			if at == -2 {
				continue // expired meanwhile
			}
			n++
			if (at == -1 || time.UnixMilli(at).After(by)) && len(late) < 10 {
				late = append(late, keys[i]+" expires at "+strconv.FormatInt(at, 10))
			}
		}
		keys = keys[:0]
	}
	for it.Next(ctx) {
		if keys = append(keys, it.Val()); len(keys) == 1000 {
			flush()
		}
	}
	require.NoError(t, it.Err())
	if len(keys) > 0 {
		flush()
	}
	return n, late
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
