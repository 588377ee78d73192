package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// req is a minimal keyfunc.Request.
type req struct {
	ctx    context.Context
	peer   string
	route  string
	header http.Header
	values map[any]any
}

func (r req) Context() context.Context       { return r.ctx }
func (r req) Method() string                 { return http.MethodGet }
func (r req) Route() (string, error)         { return r.route, nil }
func (r req) Header(n string) string         { return r.header.Get(n) }
func (r req) HeaderValues(n string) []string { return r.header.Values(n) }
func (r req) Query(string) string            { return "" }
func (r req) RemoteAddr() string             { return r.peer }
func (r req) Value(key any) any              { return r.values[key] }

func newReq(peer string) req {
	return req{ctx: context.Background(), peer: peer, header: http.Header{}, values: map[any]any{}}
}

func mini(t *testing.T) (*core.Client, *miniredis.Miniredis) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := core.New(rdb)
	require.NoError(t, err)
	return c, mr
}

func TestNewValidates(t *testing.T) {
	c, _ := mini(t)
	for _, tc := range []struct {
		r    core.Rate
		opts []policy.Option
		want error
		msg  string
	}{
		{core.Rate{}, nil, core.ErrInvalidRate, "rate 0 per 0s (Overall): core: invalid rate"},
		{core.Rate{Permits: 1, Interval: 1500 * time.Microsecond}, nil, core.ErrInvalidRate, "rate 1 per 1.5ms"},
		{core.PerSecond(5), []policy.Option{policy.WithCost(6)}, core.ErrInvalidPermits, "WithCost(6): "},
		{core.PerSecond(5), []policy.Option{policy.WithCost(0)}, core.ErrInvalidPermits, "WithCost(0): "},
		{core.PerSecond(5), []policy.Option{policy.WithCost(-1)}, core.ErrInvalidPermits, "WithCost(-1): "},
		{core.PerSecond(5), []policy.Option{policy.WithWait(-time.Second)}, core.ErrInvalidOption, "WithWait(-1s): "},
		{core.PerSecond(5), []policy.Option{policy.WithTimeout(0)}, core.ErrInvalidOption, "WithTimeout(0s): "},
		{core.PerSecond(5), []policy.Option{policy.WithTimeout(-time.Millisecond)}, core.ErrInvalidOption, "WithTimeout(-1ms): "},
		{core.PerSecond(5), []policy.Option{policy.WithMaxWaiters(0)}, core.ErrInvalidOption, "WithMaxWaiters(0): "},
		{core.PerSecond(5), []policy.Option{policy.WithName("")}, core.ErrInvalidOption, `WithName(""): `},
		{core.PerSecond(5), []policy.Option{policy.WithName("é")}, core.ErrInvalidOption, `WithName("é"): `},
		{core.PerSecond(5), []policy.Option{policy.WithName("a\nb")}, core.ErrInvalidOption, `WithName("a\nb"): `},
		{core.PerSecond(5), []policy.Option{policy.WithName(strings.Repeat("n", 65))}, core.ErrInvalidOption, `WithName("nnnn`},
		{core.PerSecond(5), []policy.Option{policy.WithKey()}, core.ErrInvalidOption, "WithKey(): "},
		{core.PerSecond(5), []policy.Option{policy.WithKey(keyfunc.IP(), nil)}, core.ErrInvalidOption, "WithKey: core: invalid option: key function 2 of 2 is nil"},
	} {
		_, err := policy.New(c, tc.r, tc.opts...)
		require.ErrorIs(t, err, tc.want, "%v", tc.msg)
		assert.Contains(t, err.Error(), tc.msg)
	}
	_, err := policy.New(nil, core.PerSecond(1))
	assert.ErrorIs(t, err, core.ErrInvalidOption)

	// Valid edges.
	for _, opts := range [][]policy.Option{
		{policy.WithCost(5)}, {policy.WithWait(0)}, {policy.WithMaxWaiters(1)}, {policy.WithTimeout(time.Nanosecond)},
		{policy.WithName(strings.Repeat("n", 64))}, {policy.WithName(` !"\~`)}, {nil},
	} {
		_, err := policy.New(c, core.PerSecond(5), opts...)
		assert.NoError(t, err)
	}
}

func decide(t *testing.T, p *policy.Policy, r keyfunc.Request, want policy.Outcome) policy.Decision {
	t.Helper()
	d := p.Decide(r, false)
	require.Equal(t, want, d.Outcome, "%+v", d)
	return d
}

// keys returns the limiters' config keys in Redis (the hashes).
func keys(t *testing.T, mr *miniredis.Miniredis) []string {
	var out []string
	for _, k := range mr.Keys() {
		if !strings.HasPrefix(k, "{") {
			out = append(out, k)
		}
	}
	return out
}

func TestLimiterNames(t *testing.T) {
	c, mr := mini(t)
	p, err := policy.New(c, core.PerSecond(1), policy.WithName("api:v1 {x}"))
	require.NoError(t, err)
	decide(t, p, newReq("192.0.2.1:1234"), policy.Allowed)
	decide(t, p, newReq("[2001:db8::1]:80"), policy.Allowed)
	assert.ElementsMatch(t, []string{"api%3Av1%20%7Bx%7D:192.0.2.1", "api%3Av1%20%7Bx%7D:2001%3Adb8%3A%3A%2F64"}, keys(t, mr),
		"policy name and key escaped")

	// A hand-written key function returns any string: it is escaped.
	mr.FlushAll()
	raw := func(r keyfunc.Request) (string, error) { return r.Header("X-Tenant"), nil }
	p, err = policy.New(c, core.PerSecond(1), policy.WithName("t"), policy.WithKey(raw))
	require.NoError(t, err)
	for _, tenant := range []string{"a:b", "{a}", strings.Repeat("x", 65)} {
		r := newReq("192.0.2.1:1")
		r.header.Set("X-Tenant", tenant)
		decide(t, p, r, policy.Allowed)
	}
	assert.ElementsMatch(t, []string{"t:a%3Ab", "t:%7Ba%7D", "t:" + keyfunc.Escape(strings.Repeat("x", 65))}, keys(t, mr))

	// Several keys are joined, each escaped, and escaped again as one key.
	mr.FlushAll()
	p, err = policy.New(c, core.PerSecond(1), policy.WithName("u"), policy.WithKey(keyfunc.Header("X-User"), keyfunc.IP()))
	require.NoError(t, err)
	r := newReq("[2001:db8::1]:80")
	r.header.Set("X-User", "a:b")
	decide(t, p, r, policy.Allowed)
	assert.Equal(t, []string{"u:a%253Ab%3A2001%253Adb8%253A%253A%252F64"}, keys(t, mr))
}

func TestMissingKey(t *testing.T) {
	c, mr := mini(t)
	user := policy.WithKey(keyfunc.User("user"))
	alice := newReq("192.0.2.1:1")
	alice.values["user"] = "alice"
	ipLike := newReq("192.0.2.1:1")
	ipLike.values["user"] = "192.0.2.1"
	anon := newReq("192.0.2.1:1")

	// The default: the client IP, in a namespace of its own.
	p, err := policy.New(c, core.PerMinute(2), policy.WithName("ip"), user)
	require.NoError(t, err)
	decide(t, p, anon, policy.Allowed)
	decide(t, p, anon, policy.Allowed)
	d := decide(t, p, anon, policy.Denied)
	assert.Nil(t, d.Err)
	decide(t, p, ipLike, policy.Allowed)
	decide(t, p, alice, policy.Allowed)
	assert.ElementsMatch(t, []string{"ip::ip:192.0.2.1", "ip:192.0.2.1", "ip:alice"}, keys(t, mr))

	// An empty key is no key.
	empty := policy.WithKey(func(keyfunc.Request) (string, error) { return "", nil })
	p, err = policy.New(c, core.PerMinute(2), policy.WithName("empty"), empty)
	require.NoError(t, err)
	decide(t, p, anon, policy.Allowed)
	assert.Contains(t, keys(t, mr), "empty::ip:192.0.2.1")

	// Behind a proxy, the fallback can trust it.
	p, err = policy.New(c, core.PerMinute(2), policy.WithName("proxied"), user,
		policy.WithMissingKeyIP(keyfunc.TrustProxies(netipPrefix(t, "192.0.2.0/24"))))
	require.NoError(t, err)
	r := newReq("192.0.2.1:1")
	r.header.Set("X-Forwarded-For", "198.51.100.7")
	decide(t, p, r, policy.Allowed)
	assert.Contains(t, keys(t, mr), "proxied::ip:198.51.100.7")

	// No client address either: the decision fails.
	d = decide(t, p, newReq("@"), policy.Failed)
	assert.ErrorIs(t, d.Err, keyfunc.ErrNoKey)

	p, err = policy.New(c, core.PerMinute(2), policy.WithName("deny"), user, policy.WithMissingKeyDeny())
	require.NoError(t, err)
	d = decide(t, p, anon, policy.Rejected)
	assert.ErrorIs(t, d.Err, keyfunc.ErrNoKey)
	status, body := p.Reply(d)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, string(body), `"status":403`)
	decide(t, p, alice, policy.Allowed)

	p, err = policy.New(c, core.PerMinute(2), policy.WithName("serve"), user, policy.WithMissingKeyServe())
	require.NoError(t, err)
	for range 3 {
		d = decide(t, p, anon, policy.Unlimited)
		status, _ := p.Reply(d)
		assert.Zero(t, status)
		assert.Empty(t, setHeaders(p, d))
	}
	assert.NotContains(t, strings.Join(keys(t, mr), " "), "serve:")

	// Other errors of a key function fail the decision, whatever the choice.
	errBoom := errors.New("boom")
	p, err = policy.New(c, core.PerMinute(2), policy.WithMissingKeyServe(),
		policy.WithKey(func(keyfunc.Request) (string, error) { return "", errBoom }))
	require.NoError(t, err)
	d = decide(t, p, anon, policy.Failed)
	assert.ErrorIs(t, d.Err, errBoom)
}

func TestRouteUnknownFails(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(2), policy.WithKey(keyfunc.Route()))
	require.NoError(t, err)
	d := decide(t, p, unrouted{newReq("192.0.2.1:1")}, policy.Failed)
	assert.ErrorIs(t, d.Err, keyfunc.ErrRouteUnknown)
	assert.Contains(t, d.Err.Error(), "put the middleware on the route")
	// A request that matched no route has no key: the missing-key choice.
	decide(t, p, newReq("192.0.2.1:1"), policy.Allowed)
}

// unrouted is a request where the framework cannot know the route.
type unrouted struct{ req }

func (unrouted) Route() (string, error) {
	return "", fmt.Errorf("example: %w: put the middleware on the route", keyfunc.ErrRouteUnknown)
}

// setHeaders returns what SetHeaders writes.
func setHeaders(p *policy.Policy, d policy.Decision) http.Header {
	h := http.Header{}
	p.SetHeaders(h, d)
	return h
}

func TestHeaders(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(100), policy.WithName(`a "q" \ b`))
	require.NoError(t, err)
	allowed := policy.Decision{Outcome: policy.Allowed, Result: core.Result{Allowed: true, Remaining: 42, ResetAfter: 16100 * time.Millisecond}}
	h := setHeaders(p, allowed)
	assert.Equal(t, `"a \"q\" \\ b";q=100;w=60`, h.Get("RateLimit-Policy"))
	assert.Equal(t, `"a \"q\" \\ b";r=42;t=17`, h.Get("RateLimit"), "t rounds up")
	assert.Equal(t, "100", h.Get("X-RateLimit-Limit"))
	assert.Equal(t, "42", h.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "17", h.Get("X-RateLimit-Reset"))
	assert.Empty(t, h.Get("Retry-After"))

	denied := policy.Decision{Outcome: policy.Denied, Result: core.Result{RetryAfter: 1001 * time.Millisecond, ResetAfter: time.Minute}}
	h = setHeaders(p, denied)
	assert.Equal(t, "2", h.Get("Retry-After"), "never earlier than the real wait")
	assert.Equal(t, `"a \"q\" \\ b";r=0;t=2`, h.Get("RateLimit"), "t agrees with Retry-After")
	assert.Equal(t, "2", h.Get("X-RateLimit-Reset"))

	h = setHeaders(p, policy.Decision{Outcome: policy.Denied, Result: core.Result{RetryAfter: time.Millisecond}})
	assert.Equal(t, "1", h.Get("Retry-After"), "at least one second")

	h = setHeaders(p, policy.Decision{Outcome: policy.Failed, Err: errors.New("x")})
	assert.Empty(t, h, "fail open writes nothing")
	closed, err := policy.New(c, core.PerMinute(100), policy.WithFailClosed())
	require.NoError(t, err)
	assert.Equal(t, http.Header{"Retry-After": {"1"}}, setHeaders(closed, policy.Decision{Outcome: policy.Failed}))

	sub, err := policy.New(c, core.Rate{Permits: 5, Interval: 1500 * time.Millisecond}, policy.WithName("s"))
	require.NoError(t, err)
	assert.Equal(t, `"s";q=5`, setHeaders(sub, allowed).Get("RateLimit-Policy"), "no w for a sub-second window")

	for _, tc := range []struct {
		opt        policy.Option
		ietf, lgcy bool
	}{{nil, true, true}, {policy.WithIETFHeaders(), true, false}, {policy.WithLegacyHeaders(), false, true}, {policy.WithoutHeaders(), false, false}} {
		p, err := policy.New(c, core.PerMinute(100), tc.opt)
		require.NoError(t, err)
		for _, d := range []policy.Decision{allowed, denied} {
			h := setHeaders(p, d)
			assert.Equal(t, tc.ietf, h.Get("RateLimit") != "")
			assert.Equal(t, tc.ietf, h.Get("RateLimit-Policy") != "")
			assert.Equal(t, tc.lgcy, h.Get("X-RateLimit-Remaining") != "")
			assert.Equal(t, d.Outcome == policy.Denied, h.Get("Retry-After") != "")
		}
	}
}

func TestHeadersOfSeveralPolicies(t *testing.T) {
	c, _ := mini(t)
	a, _ := policy.New(c, core.PerMinute(100), policy.WithName("a"))
	b, _ := policy.New(c, core.PerSecond(5), policy.WithName("b"))
	h := http.Header{}
	a.SetHeaders(h, policy.Decision{Outcome: policy.Allowed, Result: core.Result{Remaining: 50, ResetAfter: time.Minute}})
	b.SetHeaders(h, policy.Decision{Outcome: policy.Allowed, Result: core.Result{Remaining: 3, ResetAfter: time.Second}})
	a.SetHeaders(h, policy.Decision{Outcome: policy.Allowed, Result: core.Result{Remaining: 49, ResetAfter: time.Minute}})
	assert.Equal(t, []string{`"a";q=100;w=60`, `"b";q=5;w=1`, `"a";q=100;w=60`}, h.Values("RateLimit-Policy"))
	assert.Equal(t, "3", h.Get("X-RateLimit-Remaining"), "the most restrictive policy")
	assert.Equal(t, "5", h.Get("X-RateLimit-Limit"))
	assert.Equal(t, "1", h.Get("X-RateLimit-Reset"))
}

func TestReply(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(1), policy.WithName("login"))
	require.NoError(t, err)
	var body map[string]any

	status, b := p.Reply(policy.Decision{Outcome: policy.Denied})
	assert.Equal(t, http.StatusTooManyRequests, status)
	require.NoError(t, json.Unmarshal(b, &body))
	assert.Equal(t, policy.ProblemQuotaExceeded, body["type"])
	assert.EqualValues(t, 429, body["status"])
	assert.Equal(t, []any{"login"}, body["violated-policies"])

	for _, o := range []policy.Outcome{policy.Allowed, policy.Failed, policy.Unlimited} {
		status, b := p.Reply(policy.Decision{Outcome: o})
		assert.Zero(t, status, "served")
		assert.Nil(t, b)
	}

	closed, err := policy.New(c, core.PerMinute(1), policy.WithFailClosed())
	require.NoError(t, err)
	status, b = closed.Reply(policy.Decision{Outcome: policy.Failed})
	assert.Equal(t, http.StatusServiceUnavailable, status)
	body = nil
	require.NoError(t, json.Unmarshal(b, &body))
	assert.Equal(t, policy.ProblemReducedCapacity, body["type"])
	assert.EqualValues(t, 503, body["status"])
}

func TestDecide(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(2), policy.WithName("d"))
	require.NoError(t, err)
	r := newReq("192.0.2.1:1")
	for _, want := range []policy.Outcome{policy.Allowed, policy.Allowed, policy.Denied} {
		decide(t, p, r, want)
	}
	d := decide(t, p, newReq("not an address"), policy.Failed)
	assert.ErrorIs(t, d.Err, keyfunc.ErrNoKey, "no key, and no client address to fall back to")
}

func TestDecideFailsWithinTheTimeout(t *testing.T) {
	c, mr := mini(t)
	p, err := policy.New(c, core.PerMinute(2), policy.WithName("slow"), policy.WithTimeout(50*time.Millisecond), policy.WithFailOpen())
	require.NoError(t, err)
	mr.SetError("LOADING Redis is loading") // every command fails
	d := decide(t, p, newReq("192.0.2.1:1"), policy.Failed)
	assert.Error(t, d.Err)
	assert.True(t, strings.HasPrefix(d.Err.Error(), "policy slow: "), d.Err.Error())
}

func TestLogErrorIsThrottled(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(2), policy.WithName("log"))
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		p.LogError(context.Background(), errors.New("redis down"))
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "redis down"), buf.String())
	assert.Contains(t, buf.String(), "policy=log")
}

func TestSetHeadersAllocations(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(1000), policy.WithName("api"))
	require.NoError(t, err)
	d := policy.Decision{Outcome: policy.Allowed, Result: core.Result{Allowed: true, Remaining: 999, ResetAfter: time.Minute}}
	h := http.Header{}
	allocs := testing.AllocsPerRun(100, func() {
		clear(h)
		p.SetHeaders(h, d)
	})
	assert.LessOrEqual(t, allocs, 2.0, "one string for the numbers, one slab for the values")
	assert.Equal(t, `"api";r=999;t=60`, h.Get("RateLimit"))
	assert.Equal(t, "999", h.Get("X-RateLimit-Remaining"))
}
