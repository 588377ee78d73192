package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// req is a minimal policy.Exchange: a request, its context and the
// response's header.
type req struct {
	ctx    context.Context
	peer   string
	route  string
	header http.Header
	values map[any]any
	resp   http.Header
}

func (r *req) Context() context.Context       { return r.ctx }
func (r *req) SetContext(ctx context.Context) { r.ctx = ctx }
func (r *req) SetHeader(name, value string) {
	if value == "" {
		delete(r.resp, name)
		return
	}
	r.resp[name] = []string{value}
}
func (r *req) Route() (string, error)         { return r.route, nil }
func (r *req) Header(n string) string         { return r.header.Get(n) }
func (r *req) HeaderValues(n string) []string { return r.header.Values(n) }
func (r *req) Query(string) string            { return "" }
func (r *req) RemoteAddr() string             { return r.peer }
func (r *req) Value(key any) any              { return r.values[key] }
func (r *req) with(k, v string) *req          { r.header.Set(k, v); return r }
func (r *req) user(u string) *req             { r.values["user"] = u; return r }
func newReq(peer string) *req {
	return &req{ctx: context.Background(), peer: peer, header: http.Header{}, values: map[any]any{}, resp: http.Header{}}
}
func (r *req) reset() { r.ctx, r.resp = context.Background(), http.Header{} }

// testExchange is a test request that can be decided again, as a new
// request.
type testExchange interface {
	policy.Exchange
	reset()
}

// decideAgain decides r under p as a new request.
func decideAgain(p *policy.Policy, r testExchange) policy.Decision { r.reset(); return p.Decide(r) }

func mini(t *testing.T, opts ...core.Option) (*core.Client, *miniredis.Miniredis) {
	mr := miniredis.RunT(t)
	// No retries: a refusal (LOADING) is the call's answer at once, which
	// go-redis would otherwise retry until the decision's timeout.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := core.New(rdb, opts...)
	require.NoError(t, err)
	// The first call of each script on a new miniredis costs it tens of
	// milliseconds (its Lua state made) under the race detector, more on a
	// busy machine: past a policy's 100 ms, a test's first decision would
	// be the fallback's. Made here, on names no test uses.
	ctx := context.Background()
	_, err = c.Limiter("warm-up", core.WithRate(core.PerSecond(1))).TryAcquire(ctx, 1)
	require.NoError(t, err)
	_, err = c.Limiter("warm-up-quota", core.WithQuota(core.Quota{Limit: 1, Period: core.Day})).TryAcquire(ctx, 1)
	require.NoError(t, err)
	_, _, err = c.Semaphore("warm-up-slots", core.WithPermits(1)).TryAcquire(ctx, 1, time.Second)
	require.NoError(t, err)
	mr.FlushAll()
	return c, mr
}

// noDenialCache is for tests that move Redis's clock: the denial cache
// counts on the process's.
var noDenialCache = core.WithDenialCache(0)

func TestNewValidates(t *testing.T) {
	c, _ := mini(t)
	for _, tc := range []struct {
		name string
		r    core.Rate
		opts []policy.Option
		want error
		msg  string
	}{
		{"a", core.Rate{}, nil, core.ErrInvalidRate, `policy "a": rate 0 per 0s (Overall): core: invalid rate`},
		{"a", core.Rate{Permits: 1, Interval: 1500 * time.Microsecond}, nil, core.ErrInvalidRate, "rate 1 per 1.5ms"},
		{"a", core.PerSecond(5), []policy.Option{policy.WithCost(6)}, core.ErrInvalidPermits, `policy "a": WithCost(6): `},
		{"a", core.PerSecond(5), []policy.Option{policy.WithCost(0)}, core.ErrInvalidPermits, "WithCost(0): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithCost(-1)}, core.ErrInvalidPermits, "WithCost(-1): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithWait(-time.Second)}, core.ErrInvalidOption, "WithWait(-1s): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithTimeout(0)}, core.ErrInvalidOption, "WithTimeout(0s): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithTimeout(-time.Millisecond)}, core.ErrInvalidOption, "WithTimeout(-1ms): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithMaxWaiters(0)}, core.ErrInvalidOption, "WithMaxWaiters(0): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithMaxWaitersPerKey(0)}, core.ErrInvalidOption, "WithMaxWaitersPerKey(0): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithFailLocal(0)}, core.ErrInvalidOption, "WithFailLocal(0): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithKey()}, core.ErrInvalidOption, "WithKey(): "},
		{"a", core.PerSecond(5), []policy.Option{policy.WithKey(keyfunc.IP(), nil)}, core.ErrInvalidOption, "WithKey: core: invalid option: key function 2 of 2 is nil"},
		{"", core.PerSecond(5), nil, core.ErrInvalidOption, `policy "": core: invalid option: a name is 1 to 64 printable ASCII characters`},
		{"é", core.PerSecond(5), nil, core.ErrInvalidOption, `policy "é": `},
		{"a\nb", core.PerSecond(5), nil, core.ErrInvalidOption, `policy "a\nb": `},
		{strings.Repeat("n", 65), core.PerSecond(5), nil, core.ErrInvalidOption, `policy "nnnn`},
	} {
		_, err := policy.New(c, tc.name, tc.r, tc.opts...)
		require.ErrorIs(t, err, tc.want, "%v", tc.msg)
		assert.Contains(t, err.Error(), tc.msg)
	}
	_, err := policy.New(nil, "a", core.PerSecond(1))
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	assert.PanicsWithError(t, `policy "b": rate 0 per 0s (Overall): core: invalid rate: permits 0 not in [1, 4294967295]`,
		func() { policy.MustNew(c, "b", core.Rate{}) })

	// Valid edges.
	for i, opts := range [][]policy.Option{
		{policy.WithCost(5)}, {policy.WithWait(0)}, {policy.WithMaxWaiters(1)}, {policy.WithTimeout(time.Nanosecond)}, {nil},
	} {
		_, err := policy.New(c, fmt.Sprint("edge", i), core.PerSecond(5), opts...)
		assert.NoError(t, err)
	}
	for _, name := range []string{strings.Repeat("n", 64), ` !"\~`} {
		_, err := policy.New(c, name, core.PerSecond(5))
		assert.NoError(t, err)
	}
}

// keys returns the limiters' config keys in Redis (the hashes).
func keys(mr *miniredis.Miniredis) []string {
	var out []string
	for _, k := range mr.Keys() {
		if !strings.HasPrefix(k, "{") {
			out = append(out, k)
		}
	}
	return out
}

// decide decides r under p and checks its outcome and status.
func decide(t *testing.T, p *policy.Policy, r testExchange, want observe.Outcome, status int) policy.Decision {
	t.Helper()
	d := decideAgain(p, r)
	require.Equal(t, want, d.Outcome, "%+v", d)
	require.Equal(t, status, d.Status, "%+v", d)
	return d
}

func TestLimiterNames(t *testing.T) {
	c, mr := mini(t)
	p := policy.MustNew(c, "api:v1 {x}", core.PerSecond(1))
	decide(t, p, newReq("192.0.2.1:1234"), observe.Allowed, 0)
	decide(t, p, newReq("[2001:db8::1]:80"), observe.Allowed, 0)
	assert.ElementsMatch(t, []string{"api%3Av1%20%7Bx%7D:192.0.2.1", "api%3Av1%20%7Bx%7D:2001%3Adb8%3A%3A%2F64"}, keys(mr),
		"policy name and key escaped")

	// A hand-written key function returns any string: it is escaped.
	mr.FlushAll()
	raw := func(r keyfunc.Request) (string, error) { return r.Header("X-Tenant"), nil }
	p = policy.MustNew(c, "t", core.PerSecond(1), policy.WithKey(raw))
	for _, tenant := range []string{"a:b", "{a}", strings.Repeat("x", 65)} {
		decide(t, p, newReq("192.0.2.1:1").with("X-Tenant", tenant), observe.Allowed, 0)
	}
	assert.ElementsMatch(t, []string{"t:a%3Ab", "t:%7Ba%7D", "t:" + keyfunc.Escape(strings.Repeat("x", 65))}, keys(mr))

	// Several keys are joined, each escaped, and escaped again as one key.
	mr.FlushAll()
	p = policy.MustNew(c, "u", core.PerSecond(1), policy.WithKey(keyfunc.Header("X-User"), keyfunc.IP()))
	decide(t, p, newReq("[2001:db8::1]:80").with("X-User", "a:b"), observe.Allowed, 0)
	assert.Equal(t, []string{"u:a%253Ab%3A2001%253Adb8%253A%253A%252F64"}, keys(mr))
}

// Policies of one name on one Client share one budget, and must agree on
// the rate and the missing-key choice; key functions cannot be compared.
func TestOneNameIsOneLimit(t *testing.T) {
	c, _ := mini(t)
	a := policy.MustNew(c, "shared", core.PerMinute(3))
	b := policy.MustNew(c, "shared", core.PerMinute(3), policy.WithKey(keyfunc.IP()))
	r := newReq("192.0.2.1:1")
	decide(t, a, r, observe.Allowed, 0)
	decide(t, b, r, observe.Allowed, 0)
	decide(t, a, r, observe.Allowed, 0)
	decide(t, b, r, observe.Denied, http.StatusTooManyRequests)

	for _, tc := range []struct {
		r    core.Rate
		opt  policy.Option
		want string
	}{
		{core.PerMinute(4), nil, `policy "shared": core: invalid option: a policy of this name on this client has the rate 3 per 1m0s (Overall), and this one the rate 4 per 1m0s (Overall)`},
		{core.PerMinute(3), policy.WithMissingKeyServe(), "has WithMissingKeyIP(), and this one WithMissingKeyServe()"},
	} {
		_, err := policy.New(c, "shared", tc.r, tc.opt)
		require.ErrorIs(t, err, core.ErrInvalidOption)
		assert.ErrorContains(t, err, tc.want)
	}
	// Another client has its own names.
	c2, _ := mini(t)
	policy.MustNew(c2, "shared", core.PerMinute(4))
}

func TestMissingKey(t *testing.T) {
	c, mr := mini(t)
	user := policy.WithKey(keyfunc.User("user"))
	alice := newReq("192.0.2.1:1").user("alice")
	ipLike := newReq("192.0.2.1:1").user("192.0.2.1")
	anon := newReq("192.0.2.1:1")

	// The default: the client IP, in a namespace of its own; no error,
	// since a missing key is no failure.
	p := policy.MustNew(c, "ip", core.PerMinute(2), user)
	decide(t, p, anon, observe.Allowed, 0)
	decide(t, p, anon, observe.Allowed, 0)
	d := decide(t, p, anon, observe.Denied, http.StatusTooManyRequests)
	assert.NoError(t, d.Err)
	decide(t, p, ipLike, observe.Allowed, 0)
	decide(t, p, alice, observe.Allowed, 0)
	assert.ElementsMatch(t, []string{"ip::ip:192.0.2.1", "ip:192.0.2.1", "ip:alice"}, keys(mr))

	// An empty key is no key.
	p = policy.MustNew(c, "empty", core.PerMinute(2), policy.WithKey(func(keyfunc.Request) (string, error) { return "", nil }))
	decide(t, p, anon, observe.Allowed, 0)
	assert.Contains(t, keys(mr), "empty::ip:192.0.2.1")

	// Behind a proxy, the fallback can trust it.
	p = policy.MustNew(c, "proxied", core.PerMinute(2), user,
		policy.WithMissingKeyIP(keyfunc.TrustProxies(netip.MustParsePrefix("192.0.2.0/24"))))
	decide(t, p, newReq("192.0.2.1:1").with("X-Forwarded-For", "198.51.100.7"), observe.Allowed, 0)
	assert.Contains(t, keys(mr), "proxied::ip:198.51.100.7")

	// No client address either: such requests share one limiter, and the
	// error is reported; never unlimited.
	d = decide(t, p, newReq("@"), observe.Allowed, 0)
	assert.ErrorIs(t, d.Err, keyfunc.ErrNoKey)
	decide(t, p, newReq("@"), observe.Allowed, 0)
	decide(t, p, newReq(""), observe.Denied, http.StatusTooManyRequests)
	assert.Contains(t, keys(mr), "proxied::ip")

	p = policy.MustNew(c, "deny", core.PerMinute(2), user, policy.WithMissingKeyDeny())
	d = decide(t, p, anon, observe.ErrorRejected, http.StatusForbidden)
	assert.NoError(t, d.Err)
	assert.Contains(t, string(d.Body), `"status":403`)
	decide(t, p, alice, observe.Allowed, 0)

	p = policy.MustNew(c, "serve", core.PerMinute(2), user, policy.WithMissingKeyServe())
	for range 3 {
		d = decide(t, p, anon, observe.ErrorServed, 0)
		assert.Empty(t, anon.resp, "no limit, no headers")
	}
	assert.NotContains(t, strings.Join(keys(mr), " "), "serve:")
}

var errBoom = errors.New("boom")

// A key function that fails, or cannot know the route, falls under the
// missing-key rule, and its error is reported: never unlimited by
// accident.
func TestKeyFunctionFailureFallsUnderTheMissingKeyRule(t *testing.T) {
	c, mr := mini(t)
	boom := policy.WithKey(func(keyfunc.Request) (string, error) { return "", errBoom })
	r := newReq("192.0.2.1:1")

	p := policy.MustNew(c, "boom", core.PerMinute(1), boom)
	d := decide(t, p, r, observe.Allowed, 0)
	assert.ErrorIs(t, d.Err, errBoom)
	assert.ErrorContains(t, d.Err, "policy boom: key: boom")
	d = decide(t, p, r, observe.Denied, http.StatusTooManyRequests)
	assert.ErrorIs(t, d.Err, errBoom)
	assert.Contains(t, keys(mr), "boom::ip:192.0.2.1")

	d = decide(t, policy.MustNew(c, "boom-deny", core.PerMinute(1), boom, policy.WithMissingKeyDeny()), r, observe.ErrorRejected, http.StatusForbidden)
	assert.ErrorIs(t, d.Err, errBoom)
	d = decide(t, policy.MustNew(c, "boom-serve", core.PerMinute(1), boom, policy.WithMissingKeyServe()), r, observe.ErrorServed, 0)
	assert.ErrorIs(t, d.Err, errBoom, "served as the missing-key choice says, and reported")

	route := policy.MustNew(c, "route", core.PerMinute(1), policy.WithKey(keyfunc.Route()))
	d = decide(t, route, &unrouted{newReq("192.0.2.1:1")}, observe.Allowed, 0)
	assert.ErrorIs(t, d.Err, keyfunc.ErrRouteUnknown)
	assert.ErrorContains(t, d.Err, "put the middleware on the route")
	decide(t, route, &unrouted{newReq("192.0.2.1:1")}, observe.Denied, http.StatusTooManyRequests)
	assert.Contains(t, keys(mr), "route::ip:192.0.2.1")
	// A request that matched no route has no key: no error.
	d = decide(t, route, newReq("192.0.2.2:1"), observe.Allowed, 0)
	assert.NoError(t, d.Err)
}

// unrouted is a request where the framework cannot know the route.
type unrouted struct{ *req }

func (*unrouted) Route() (string, error) {
	return "", fmt.Errorf("example: %w: put the middleware on the route", keyfunc.ErrRouteUnknown)
}

// A rate function that fails or gives an invalid rate limits at the
// policy's own rate, and reports the error.
func TestRateFunctionFailureLimitsAtThePolicysRate(t *testing.T) {
	c, _ := mini(t)
	plans := map[string]core.Rate{"pro": core.PerMinute(4)}
	p := policy.MustNew(c, "plan", core.PerMinute(2), policy.WithKey(keyfunc.User("user")),
		policy.WithRateFunc(func(r keyfunc.Request) (core.Rate, error) {
			if r.Header("X-Plan") == "error" {
				return core.Rate{}, errBoom
			}
			return plans[r.Header("X-Plan")], nil
		}))
	pro := newReq("192.0.2.1:1").user("p").with("X-Plan", "pro")
	for range 4 {
		d := decide(t, p, pro, observe.Allowed, 0)
		assert.NoError(t, d.Err)
		assert.Equal(t, `"plan";q=4;w=60`, pro.resp.Get("RateLimit-Policy"))
	}
	for _, plan := range []string{"unknown", "error"} {
		r := newReq("192.0.2.1:1").user(plan).with("X-Plan", plan)
		decide(t, p, r, observe.Allowed, 0)
		d := decide(t, p, r, observe.Allowed, 0)
		assert.Equal(t, `"plan";q=2;w=60`, r.resp.Get("RateLimit-Policy"), "the policy's own rate")
		d = decide(t, p, r, observe.Denied, http.StatusTooManyRequests)
		assert.ErrorContains(t, d.Err, "policy plan: rate (limited at the policy's own rate): ")
	}
	d := decideAgain(p, newReq("192.0.2.1:1").user("u").with("X-Plan", "unknown"))
	assert.ErrorIs(t, d.Err, core.ErrInvalidRate)
	d = decideAgain(p, newReq("192.0.2.1:1").user("u").with("X-Plan", "error"))
	assert.ErrorIs(t, d.Err, errBoom)
}

// A cost that cannot be read, or is below 1, is the client's mistake:
// 400. A cost above the rate can never be granted: 413.
func TestCosts(t *testing.T) {
	c, _ := mini(t)
	p := policy.MustNew(c, "batch", core.PerMinute(10), policy.WithCostFunc(func(r keyfunc.Request) (int64, error) {
		var n int64
		_, err := fmt.Sscan(r.Header("X-Items"), &n)
		return n, err
	}))
	r := newReq("192.0.2.1:1")
	decide(t, p, r.with("X-Items", "4"), observe.Allowed, 0)
	assert.Equal(t, "6", r.resp.Get("X-Ratelimit-Remaining"))
	for _, items := range []string{"0", "-1", "x", ""} {
		d := decide(t, p, r.with("X-Items", items), observe.ErrorRejected, http.StatusBadRequest)
		assert.Contains(t, string(d.Body), `"status":400`)
		assert.ErrorContains(t, d.Err, "policy batch: cost: ")
		assert.Empty(t, r.resp, "no limiter decided: no fields")
	}
	d := decide(t, p, r.with("X-Items", "11"), observe.Denied, http.StatusRequestEntityTooLarge)
	assert.NoError(t, d.Err, "a request too big is no error")
	assert.Contains(t, string(d.Body), "docs/middleware.md#a-cost-above-the-rate")
	assert.Empty(t, r.resp.Get("Retry-After"), "no retry time that would lie")
	decide(t, p, r.with("X-Items", "6"), observe.Allowed, 0)
	decide(t, p, r.with("X-Items", "1"), observe.Denied, http.StatusTooManyRequests)
}

func TestHeaders(t *testing.T) {
	c, mr := mini(t, noDenialCache)
	mr.SetTime(time.Unix(1_700_000_000, 0))
	p := policy.MustNew(c, `a "q" \ b`, core.PerMinute(3))
	r := newReq("192.0.2.1:1")
	decide(t, p, r, observe.Allowed, 0)
	assert.Equal(t, http.Header{
		"Ratelimit-Policy":      {`"a \"q\" \\ b";q=3;w=60`},
		"Ratelimit":             {`"a \"q\" \\ b";r=2;t=60`},
		"X-Ratelimit-Limit":     {"3"},
		"X-Ratelimit-Remaining": {"2"},
		"X-Ratelimit-Reset":     {"60"},
	}, r.resp)
	decide(t, p, r, observe.Allowed, 0)
	mr.SetTime(time.Unix(1_700_000_000, 100e6))
	decide(t, p, r, observe.Allowed, 0)
	mr.SetTime(time.Unix(1_700_000_001, 0))
	decide(t, p, r, observe.Denied, http.StatusTooManyRequests)
	assert.Equal(t, "59", r.resp.Get("Retry-After"), "until the first grant leaves the window")
	assert.Equal(t, `"a \"q\" \\ b";r=0;t=59`, r.resp.Get("RateLimit"), "t agrees with Retry-After")
	assert.Equal(t, "59", r.resp.Get("X-RateLimit-Reset"))
	mr.SetTime(time.Unix(1_700_000_059, 999e6))
	decide(t, p, r, observe.Denied, http.StatusTooManyRequests)
	assert.Equal(t, "1", r.resp.Get("Retry-After"), "1 ms, rounded up: never earlier than the real wait")

	sub := policy.MustNew(c, "s", core.Rate{Permits: 5, Interval: 1500 * time.Millisecond})
	decide(t, sub, r, observe.Allowed, 0)
	assert.Equal(t, `"s";q=5`, r.resp.Get("RateLimit-Policy"), "no w for a sub-second window")

	for i, tc := range []struct {
		opt        policy.Option
		ietf, lgcy bool
	}{{nil, true, true}, {policy.WithIETFHeaders(), true, false}, {policy.WithLegacyHeaders(), false, true}, {policy.WithoutHeaders(), false, false}} {
		p := policy.MustNew(c, fmt.Sprint("style", i), core.PerMinute(1), tc.opt)
		for _, status := range []int{0, http.StatusTooManyRequests} {
			d := decideAgain(p, r)
			require.Equal(t, status, d.Status)
			assert.Equal(t, tc.ietf, r.resp.Get("RateLimit") != "")
			assert.Equal(t, tc.ietf, r.resp.Get("RateLimit-Policy") != "")
			assert.Equal(t, tc.lgcy, r.resp.Get("X-RateLimit-Remaining") != "")
			assert.Equal(t, status != 0, r.resp.Get("Retry-After") != "")
		}
	}

	// Fail open writes nothing; fail closed, Retry-After 1.
	mr.SetError("LOADING Redis is loading")
	open := policy.MustNew(c, "open", core.PerMinute(100), policy.WithFailOpen())
	decide(t, open, r, observe.ErrorServed, 0)
	assert.Empty(t, r.resp)
	closed := policy.MustNew(c, "closed", core.PerMinute(100), policy.WithFailClosed())
	d := decide(t, closed, r, observe.ErrorRejected, http.StatusServiceUnavailable)
	assert.Equal(t, http.Header{"Retry-After": {"1"}}, r.resp)
	var body map[string]any
	require.NoError(t, json.Unmarshal(d.Body, &body))
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", body["type"])
}

// The limits of one request share what they must: every policy lists
// itself, X-RateLimit-* are those of the one with the fewest permits left
// or of the one that refused, and a refusal gives back the grants of the
// policies before it.
func TestTheLimitsOfOneRequest(t *testing.T) {
	c, mr := mini(t, noDenialCache)
	a := policy.MustNew(c, "a", core.PerMinute(100))
	b := policy.MustNew(c, "b", core.PerSecond(2))
	h := policy.MustNew(c, "h", core.PerHour(3))
	r := newReq("192.0.2.1:1")
	chain := func() []policy.Decision {
		r.reset()
		var ds []policy.Decision
		for _, p := range []*policy.Policy{a, b, h} {
			d := p.Decide(r)
			ds = append(ds, d)
			if d.Status != 0 {
				break
			}
		}
		for i := len(ds) - 1; i >= 0; i-- {
			if ds[i].Status == 0 {
				ds[i].Done(http.StatusOK)
			}
		}
		return ds
	}
	ds := chain()
	require.Len(t, ds, 3)
	assert.Equal(t, `"a";q=100;w=60, "b";q=2;w=1, "h";q=3;w=3600`, r.resp.Get("RateLimit-Policy"))
	assert.Equal(t, `"a";r=99;t=60, "b";r=1;t=1, "h";r=2;t=3600`, r.resp.Get("RateLimit"))
	assert.Equal(t, "1", r.resp.Get("X-RateLimit-Remaining"), "the fewest permits left")
	assert.Equal(t, "2", r.resp.Get("X-RateLimit-Limit"))
	chain()
	ds = chain()
	require.Len(t, ds, 2, "the burst limit refused")
	assert.Equal(t, "2", r.resp.Get("X-RateLimit-Limit"), "the refusing limit's headers")
	assert.Equal(t, "1", r.resp.Get("Retry-After"))
	mr.SetTime(time.Now().Add(time.Second))
	chain()
	ds = chain()
	require.Len(t, ds, 3, "the hourly limit refused")
	assert.Equal(t, "3", r.resp.Get("X-RateLimit-Limit"))
	// a granted 5 times and b 4 times, but each gave back the grants of the
	// requests a later limit refused.
	assert.EqualValues(t, 97, available(t, c, "a:192.0.2.1", core.PerMinute(100)))
	assert.EqualValues(t, 1, available(t, c, "b:192.0.2.1", core.PerSecond(2)))
	assert.EqualValues(t, 0, available(t, c, "h:192.0.2.1", core.PerHour(3)))
}

func available(t *testing.T, c *core.Client, name string, r core.Rate) int64 {
	t.Helper()
	n, err := c.Limiter(name, core.WithRate(r)).AvailablePermits(context.Background())
	require.NoError(t, err)
	return n
}

// Done gives a grant back when the refund rule matches the status.
func TestRefundRules(t *testing.T) {
	c, _ := mini(t)
	for _, tc := range []struct {
		opt      policy.Option
		status   int
		refunded bool
	}{
		{policy.WithRefundFailed(), 500, true}, {policy.WithRefundFailed(), 404, true}, {policy.WithRefundFailed(), 200, false},
		{policy.WithRefundSuccessful(), 200, true}, {policy.WithRefundSuccessful(), 302, true}, {policy.WithRefundSuccessful(), 401, false},
		{policy.WithRefund(func(s int) bool { return s == 418 }), 418, true}, {nil, 500, false},
	} {
		name := fmt.Sprint("refund", tc.status, tc.refunded)
		p := policy.MustNew(c, name+fmt.Sprint(time.Now().UnixNano()), core.PerMinute(5), tc.opt)
		r := newReq("192.0.2.1:1")
		d := decideAgain(p, r)
		d.Done(tc.status)
		d = decideAgain(p, r)
		want := int64(3)
		if tc.refunded {
			want = 4
		}
		assert.Equal(t, want, d.Result.Remaining, "%s: status %d", name, tc.status)
	}
}

// A Redis that answers LOADING to everything fails: under fail open the
// request is served, within the timeout, and the error reported.
func TestDecideFailsWithinTheTimeout(t *testing.T) {
	c, mr := mini(t)
	// A timeout that a loaded machine does not miss: the refusal, read
	// late, would be no answer (decided in memory), not Redis failing.
	p := policy.MustNew(c, "slow", core.PerMinute(2), policy.WithTimeout(time.Second), policy.WithFailOpen())
	mr.SetError("LOADING Redis is loading") // every command fails
	start := time.Now()
	d := decide(t, p, newReq("192.0.2.1:1"), observe.ErrorServed, 0)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.ErrorIs(t, d.Err, core.ErrUnavailable)
	assert.True(t, strings.HasPrefix(d.Err.Error(), "policy slow: "), d.Err.Error())
}

// LogError writes to the policy's logger, at most a line a second.
func TestLogErrorIsThrottled(t *testing.T) {
	var buf bytes.Buffer
	c, _ := mini(t)
	p := policy.MustNew(c, "log", core.PerMinute(2), policy.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	for i := 0; i < 100; i++ {
		p.LogError(context.Background(), errors.New("redis down"))
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "redis down"), buf.String())
	assert.Contains(t, buf.String(), "policy=log")
}

// Settle with a count out of range is an error for the handler, not a
// panic that takes the process down, and changes nothing.
func TestSettleOutOfRangeIsAnError(t *testing.T) {
	c, _ := mini(t)
	p := policy.MustNew(c, "settle", core.PerMinute(100), policy.WithCost(10))
	r := newReq("192.0.2.1:1")
	d := decide(t, p, r, observe.Allowed, 0)
	for _, n := range []int64{-1, core.MaxPermits + 1} {
		err := p.Settle(r.Context(), n)
		assert.ErrorIs(t, err, core.ErrInvalidPermits, "%d", n)
	}
	require.NoError(t, p.Settle(r.Context(), 3))
	require.NoError(t, p.Settle(context.Background(), 3), "a request the policy did not limit: nothing to do")
	d.Done(http.StatusOK)
	res := decideAgain(p, r)
	assert.EqualValues(t, 100-3-10, res.Result.Remaining, "settled to 3, then 10 more")
}

// A rate function's rate of another interval or type than the policy's is
// refused: the request is limited at the policy's rate and the error is
// reported; a rate of other permits is used, with the limiter's history.
func TestRateFuncKeepsTheWindow(t *testing.T) {
	c, _ := mini(t)
	rates := map[string]core.Rate{
		"pro":    core.PerMinute(100),
		"fast":   core.PerSecond(100),
		"client": {Type: core.PerClient, Permits: 100, Interval: time.Minute},
	}
	p := policy.MustNew(c, "plans", core.PerMinute(5), policy.WithRateFunc(func(r keyfunc.Request) (core.Rate, error) {
		return rates[r.Header("X-Plan")], nil
	}))
	for _, plan := range []string{"fast", "client"} {
		d := decideAgain(p, newReq("192.0.2.1:1").with("X-Plan", plan))
		assert.ErrorIs(t, d.Err, core.ErrInvalidRate, plan)
		assert.EqualValues(t, 5, d.Result.Rate.Permits, plan)
	}
	d := decideAgain(p, newReq("192.0.2.1:1").with("X-Plan", "pro"))
	require.NoError(t, d.Err)
	assert.EqualValues(t, 100-3, d.Result.Remaining, "the two before count")
}
