package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	header http.Header
}

func (r req) Context() context.Context       { return r.ctx }
func (r req) Method() string                 { return http.MethodGet }
func (r req) Route() string                  { return "/r" }
func (r req) Path() string                   { return "/r" }
func (r req) Header(n string) string         { return r.header.Get(n) }
func (r req) HeaderValues(n string) []string { return r.header.Values(n) }
func (r req) Query(string) string            { return "" }
func (r req) RemoteAddr() string             { return r.peer }
func (r req) Value(key any) any              { return r.ctx.Value(key) }
func newReq(peer string) req {
	return req{ctx: context.Background(), peer: peer, header: http.Header{}}
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
		s    policy.Settings
		want error
	}{
		{core.Rate{}, policy.Settings{}, core.ErrInvalidRate},
		{core.PerSecond(5), policy.Settings{Cost: 6}, core.ErrInvalidPermits},
		{core.PerSecond(5), policy.Settings{Cost: -1}, core.ErrInvalidPermits},
		{core.PerSecond(5), policy.Settings{MaxWait: -1}, core.ErrInvalidOption},
		{core.PerSecond(5), policy.Settings{Timeout: -1}, core.ErrInvalidOption},
		{core.PerSecond(5), policy.Settings{MaxWaiters: -1}, core.ErrInvalidOption},
		{core.PerSecond(5), policy.Settings{Headers: 9}, core.ErrInvalidOption},
		{core.PerSecond(5), policy.Settings{Name: "é"}, core.ErrInvalidOption},
		{core.PerSecond(5), policy.Settings{Name: "a\nb"}, core.ErrInvalidOption},
		{core.PerSecond(5), policy.Settings{Keys: []keyfunc.KeyFunc{nil}}, core.ErrInvalidOption},
	} {
		_, err := policy.New(c, tc.r, tc.s)
		assert.ErrorIs(t, err, tc.want, "%+v", tc)
	}
	_, err := policy.New(nil, core.PerSecond(1), policy.Settings{})
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	p, err := policy.New(c, core.PerSecond(1), policy.Settings{})
	require.NoError(t, err)
	assert.Equal(t, policy.DefaultName, p.Name())
	assert.False(t, p.FailClosed())
}

func TestLimiterNames(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerSecond(1), policy.Settings{Name: "api:v1 {x}"})
	require.NoError(t, err)
	name, err := p.LimiterName(newReq("192.0.2.1:1234"))
	require.NoError(t, err)
	assert.Equal(t, "api%3Av1%20%7Bx%7D:192.0.2.1", name, "policy name escaped, key part from the peer")

	p, err = policy.New(c, core.PerSecond(1), policy.Settings{Name: "u", Keys: []keyfunc.KeyFunc{keyfunc.Header("X-User"), keyfunc.IP()}})
	require.NoError(t, err)
	r := newReq("[2001:db8::1]:80")
	r.header.Set("X-User", "a:b")
	name, err = p.LimiterName(r)
	require.NoError(t, err)
	assert.Equal(t, "u:a%3Ab:2001%3Adb8%3A%3A%2F64", name, "several keys are joined")

	_, err = p.LimiterName(newReq("192.0.2.1:1"))
	assert.ErrorIs(t, err, keyfunc.ErrNoKey)
}

// header collects what SetHeaders writes.
func setHeaders(p *policy.Policy, d policy.Decision) http.Header {
	h := http.Header{}
	p.SetHeaders(h, d)
	return h
}

func TestHeaders(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(100), policy.Settings{Name: `a "q" \ b`})
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
	closed, err := policy.New(c, core.PerMinute(100), policy.Settings{FailClosed: true})
	require.NoError(t, err)
	assert.Equal(t, http.Header{"Retry-After": {"1"}}, setHeaders(closed, policy.Decision{Outcome: policy.Failed}))

	sub, err := policy.New(c, core.Rate{Permits: 5, Interval: 1500 * time.Millisecond}, policy.Settings{Name: "s"})
	require.NoError(t, err)
	assert.Equal(t, `"s";q=5`, setHeaders(sub, allowed).Get("RateLimit-Policy"), "no w for a sub-second window")
}

func TestHeadersOfSeveralPolicies(t *testing.T) {
	c, _ := mini(t)
	a, _ := policy.New(c, core.PerMinute(100), policy.Settings{Name: "a"})
	b, _ := policy.New(c, core.PerSecond(5), policy.Settings{Name: "b"})
	h := http.Header{}
	a.SetHeaders(h, policy.Decision{Outcome: policy.Allowed, Result: core.Result{Remaining: 50, ResetAfter: time.Minute}})
	b.SetHeaders(h, policy.Decision{Outcome: policy.Allowed, Result: core.Result{Remaining: 3, ResetAfter: time.Second}})
	a.SetHeaders(h, policy.Decision{Outcome: policy.Allowed, Result: core.Result{Remaining: 49, ResetAfter: time.Minute}})
	assert.Equal(t, []string{`"a";q=100;w=60`, `"b";q=5;w=1`, `"a";q=100;w=60`}, h.Values("RateLimit-Policy"))
	assert.Equal(t, "3", h.Get("X-RateLimit-Remaining"), "the most restrictive policy")
	assert.Equal(t, "5", h.Get("X-RateLimit-Limit"))
	assert.Equal(t, "1", h.Get("X-RateLimit-Reset"))
}

func TestProblemBodies(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(1), policy.Settings{Name: "login"})
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(p.DenyBody(), &body))
	assert.Equal(t, policy.ProblemQuotaExceeded, body["type"])
	assert.EqualValues(t, 429, body["status"])
	assert.Equal(t, []any{"login"}, body["violated-policies"])
	require.NoError(t, json.Unmarshal(p.UnavailableBody(), &body))
	assert.Equal(t, policy.ProblemReducedCapacity, body["type"])
	assert.EqualValues(t, 503, body["status"])
}

func TestDecide(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(2), policy.Settings{Name: "d"})
	require.NoError(t, err)
	r := newReq("192.0.2.1:1")
	for _, want := range []policy.Outcome{policy.Allowed, policy.Allowed, policy.Denied} {
		assert.Equal(t, want, p.Decide(r).Outcome)
	}
	d := p.Decide(newReq("not an address"))
	assert.Equal(t, policy.Failed, d.Outcome)
	assert.ErrorIs(t, d.Err, keyfunc.ErrNoKey)
}

func TestDecideFailsWithinTheTimeout(t *testing.T) {
	c, mr := mini(t)
	p, err := policy.New(c, core.PerMinute(2), policy.Settings{Timeout: 50 * time.Millisecond})
	require.NoError(t, err)
	mr.SetError("LOADING Redis is loading") // every command fails
	d := p.Decide(newReq("192.0.2.1:1"))
	assert.Equal(t, policy.Failed, d.Outcome)
	assert.Error(t, d.Err)
	assert.True(t, strings.HasPrefix(d.Err.Error(), "policy default: "), d.Err.Error())
}

func TestLogErrorIsThrottled(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(2), policy.Settings{Name: "log"})
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		p.LogError(context.Background(), errors.New("redis down"))
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "redis down"), buf.String())
	assert.Contains(t, buf.String(), "policy=log")
}

func TestSetHeadersAllocations(t *testing.T) {
	c, _ := mini(t)
	p, err := policy.New(c, core.PerMinute(1000), policy.Settings{Name: "api"})
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
