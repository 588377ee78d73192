package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/admin"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()

// The users of the tests: keys with the characters a path must escape, a
// key that a path cleans away unescaped, and one long enough to be hashed.
var (
	long  = strings.Repeat("k", 100)
	users = []string{"alice", "a/b", "c:d", "with space", "{x}", "%2F", "..", "é", long}
)

// limits are the policies of one application, and the API over them.
type limits struct {
	api, exports *policy.Policy
	app          http.Handler // limited by api: GET / with X-User
	srv          *httptest.Server
}

// newLimits returns a rate of 3 a minute by user ("api") and 2 requests in
// flight ("exports") on a Client of its own key prefix, served under
// /admin by the handler that mount returns.
func newLimits(t *testing.T, rdb redis.UniversalClient, mount func(...*policy.Policy) http.Handler) *limits {
	t.Helper()
	c, err := core.New(rdb, core.WithKeyPrefix(t.Name()+"."+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	require.NoError(t, err)
	byUser := policy.WithKey(keyfunc.Header("X-User"))
	l := &limits{
		api:     policy.MustNew(c, "api", core.PerMinute(3), byUser),
		exports: policy.MustNewConcurrency(c, "exports", 2, byUser),
	}
	l.app = nethttprl.New(l.api)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	l.srv = httptest.NewServer(http.StripPrefix("/admin", mount(l.api, l.exports)))
	t.Cleanup(l.srv.Close)
	return l
}

// request makes one request of user ("": none) to the application.
func (l *limits) request(t *testing.T, user string) int {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if user != "" {
		r.Header.Set("X-User", user)
	}
	w := httptest.NewRecorder()
	l.app.ServeHTTP(w, r)
	return w.Code
}

// call makes a request to the API at path (below /admin, escaped) and
// returns its status, its media type and its body decoded.
func (l *limits) call(t *testing.T, method, path, body string) (int, string, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, l.srv.URL+"/admin"+path, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := l.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if len(b) > 0 {
		require.NoError(t, json.Unmarshal(b, &out), "%s %s: %s", method, path, b)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), out
}

// keyPath is the path of user's key in the policy name.
func keyPath(name, key string) string {
	return "/policies/" + url.PathEscape(name) + "/keys/" + url.PathEscape(key)
}

// pathOf escapes a key as clients must: url.PathEscape, and the keys that
// a path would clean, "." and "..", in %2E.
func pathOf(name, key string) string {
	if key == "." || key == ".." {
		return "/policies/" + name + "/keys/" + strings.ReplaceAll(key, ".", "%2E")
	}
	return keyPath(name, key)
}

// problem checks that a call was answered status with a problem+json body.
func problem(t *testing.T, l *limits, status int, method, path, body string) string {
	t.Helper()
	got, ct, out := l.call(t, method, path, body)
	require.Equal(t, status, got, "%s %s: %v", method, path, out)
	assert.Equal(t, policy.ProblemContentType, ct, "%s %s", method, path)
	assert.EqualValues(t, status, out["status"], "%s %s", method, path)
	assert.NotEmpty(t, out["detail"], "%s %s", method, path)
	detail, _ := out["detail"].(string)
	return detail
}

// The read-only handler lists the policies and their keys, whatever their
// characters, tells each key's state, and refuses every write.
func TestReadOnly(t *testing.T) {
	redistest.Need(t)
	l := newLimits(t, redistest.Shared(t).Client(t), admin.Handler)
	for _, u := range users {
		require.Equal(t, http.StatusOK, l.request(t, u))
	}
	require.Equal(t, http.StatusOK, l.request(t, "")) // no user: its address

	status, ct, out := l.call(t, "GET", "/policies", "")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "application/json", ct)
	assert.Equal(t, []any{
		map[string]any{"name": "api", "kind": "rate", "limit": 3.0, "interval_ms": 60000.0},
		map[string]any{"name": "exports", "kind": "concurrency", "limit": 2.0},
	}, out["policies"])
	status, _, out = l.call(t, "GET", "/policies/exports", "")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "concurrency", out["kind"])

	status, _, out = l.call(t, "GET", "/policies/api/keys", "")
	require.Equal(t, http.StatusOK, status)
	var keys []string
	for _, k := range out["keys"].([]any) {
		keys = append(keys, k.(string))
	}
	assert.Equal(t, false, out["truncated"])
	want := append(slices.Clone(users[:len(users)-1]), ":ip:192.0.2.1", keyfunc.Escape(long))
	slices.Sort(keys)
	slices.Sort(want)
	assert.Equal(t, want, keys, "every key, as the key function returned it, the long one by its hash")

	for _, k := range keys {
		status, _, out := l.call(t, "GET", pathOf("api", k), "")
		require.Equal(t, http.StatusOK, status, "%q: %v", k, out)
		assert.Equal(t, k, out["key"])
		assert.Equal(t, true, out["allowed"], k)
		assert.EqualValues(t, 2, out["remaining"], k)
		assert.EqualValues(t, 3, out["limit"], k)
		assert.EqualValues(t, 60000, out["interval_ms"], k)
		assert.NotContains(t, out, "override", k)
	}
	status, _, out = l.call(t, "GET", keyPath("exports", "alice"), "")
	require.Equal(t, http.StatusOK, status)
	assert.EqualValues(t, 2, out["remaining"])
	assert.NotContains(t, out, "interval_ms", "a concurrency limit has no interval")

	for _, w := range []struct{ method, path, body string }{
		{"POST", keyPath("api", "a/b") + "/reset", ""},
		{"PUT", keyPath("api", "a/b") + "/override", `{"limit": 10}`},
		{"DELETE", keyPath("api", "a/b") + "/override", ""},
	} {
		detail := problem(t, l, http.StatusForbidden, w.method, w.path, w.body)
		assert.Contains(t, detail, "read-only")
	}
	r, err := l.api.Peek(bg, "a/b")
	require.NoError(t, err)
	assert.EqualValues(t, 2, r.Remaining, "nothing reset")
	_, ok, err := l.api.Override(bg, "a/b")
	require.NoError(t, err)
	assert.False(t, ok, "no override set")
}

// The writable handler resets keys and sets and deletes their overrides,
// whatever their characters, as the policy's own methods do.
func TestWrites(t *testing.T) {
	redistest.Need(t)
	l := newLimits(t, redistest.Shared(t).Client(t), admin.WritableHandler)
	for _, k := range users {
		for range 3 {
			require.Equal(t, http.StatusOK, l.request(t, k))
		}
		require.Equal(t, http.StatusTooManyRequests, l.request(t, k))
		key := k
		if k == long {
			key = keyfunc.Escape(long) // as the keys list it
		}
		p := pathOf("api", key)
		_, _, out := l.call(t, "GET", p, "")
		assert.Equal(t, false, out["allowed"], k)
		assert.Positive(t, out["retry_after_ms"], k)
		assert.Positive(t, out["reset_after_ms"], k)

		status, _, _ := l.call(t, "POST", p+"/reset", "")
		require.Equal(t, http.StatusNoContent, status, k)
		_, _, out = l.call(t, "GET", p, "")
		assert.Equal(t, true, out["allowed"], k)
		assert.EqualValues(t, 3, out["remaining"], "%q reset", k)

		problem(t, l, http.StatusNotFound, "GET", p+"/override", "")
		status, _, out = l.call(t, "PUT", p+"/override", `{"limit": 10}`)
		require.Equal(t, http.StatusOK, status, "%q: %v", k, out)
		assert.Equal(t, map[string]any{"policy": "api", "key": key, "limit": 10.0}, out)
		_, _, out = l.call(t, "GET", p+"/override", "")
		assert.EqualValues(t, 10, out["limit"], k)
		_, _, out = l.call(t, "GET", p, "")
		assert.EqualValues(t, 10, out["override"], k)
		assert.EqualValues(t, 10, out["limit"], k)
		assert.EqualValues(t, 10, out["remaining"], k)
		limit, ok, err := l.api.Override(bg, k)
		require.NoError(t, err)
		assert.True(t, ok, k)
		assert.EqualValues(t, 10, limit, "%q: the override as the policy reads it", k)

		status, _, _ = l.call(t, "DELETE", p+"/override", "")
		require.Equal(t, http.StatusNoContent, status, k)
		problem(t, l, http.StatusNotFound, "GET", p+"/override", "")
		_, ok, err = l.api.Override(bg, k)
		require.NoError(t, err)
		assert.False(t, ok, k)
	}
	status, _, out := l.call(t, "PUT", keyPath("exports", "bob")+"/override", `{"limit": 5}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	_, _, out = l.call(t, "GET", keyPath("exports", "bob"), "")
	assert.EqualValues(t, 5, out["remaining"], "a concurrency limit's override")
}

// Bad input is answered 400, an unknown policy or path 404 and a method a
// path does not have 405, each with a problem saying what is wrong: never
// a 500.
func TestBadInput(t *testing.T) {
	redistest.Need(t)
	l := newLimits(t, redistest.Shared(t).Client(t), admin.WritableHandler)
	for _, c := range []struct {
		status             int
		method, path, body string
		says               string
	}{
		{404, "GET", "/policies/nope", "", `"nope"`},
		{404, "GET", "/policies/nope/keys", "", `"nope"`},
		{404, "GET", keyPath("nope", "alice"), "", `"nope"`},
		{404, "PUT", keyPath("nope", "alice") + "/override", `{"limit": 1}`, `"nope"`},
		{404, "GET", "/", "", "/policies"},
		{404, "GET", "/policies/api/keys/a/b", "", "%2F"}, // a key's "/" unescaped
		{404, "GET", "/policies/api/keys/alice/nothing", "", "/policies"},
		{405, "POST", "/policies", "", "GET"},
		{405, "GET", keyPath("api", "alice") + "/reset", "", "POST"},
		{405, "PATCH", keyPath("api", "alice") + "/override", "", "PUT"},
		{400, "GET", "/policies/api/keys?limit=0", "", "limit"},
		{400, "GET", "/policies/api/keys?limit=-1", "", "limit"},
		{400, "GET", "/policies/api/keys?limit=many", "", "limit"},
		{400, "GET", "/policies/api/keys?limit=100001", "", "limit"},
		{400, "PUT", keyPath("api", "alice") + "/override", "", "limit"},
		{400, "PUT", keyPath("api", "alice") + "/override", "{}", `no "limit"`},
		{400, "PUT", keyPath("api", "alice") + "/override", "10", "limit"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": "10"}`, "limit"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": 2.5}`, "limit"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": 1e30}`, "limit"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": 10, "for": "ever"}`, "unknown field"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": 10} {"limit": 11}`, "more than one"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": 10, "limit": 99999}`, `"limit" twice`},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"Limit": 7}`, `unknown field "Limit"`},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": null}`, "null"},
		{400, "PUT", keyPath("api", "alice") + "/override", `[{"limit": 10}]`, "not a JSON object"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": 10, "x": "` + strings.Repeat("x", 2000) + `"}`, "limit"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": 0}`, "invalid permits"},
		{400, "PUT", keyPath("api", "alice") + "/override", `{"limit": -5}`, "invalid permits"},
		{400, "PUT", keyPath("exports", "alice") + "/override", `{"limit": 10001}`, "invalid permits"},
	} {
		detail := problem(t, l, c.status, c.method, c.path, c.body)
		assert.Contains(t, detail, c.says, "%s %s %s", c.method, c.path, c.body)
	}
	_, ok, err := l.api.Override(bg, "alice")
	require.NoError(t, err)
	assert.False(t, ok, "no bad override was set")
}

// The keys listed are bounded by limit, and say when there are more.
func TestKeysLimit(t *testing.T) {
	redistest.Need(t)
	l := newLimits(t, redistest.Shared(t).Client(t), admin.Handler)
	for i := range 5 {
		require.Equal(t, http.StatusOK, l.request(t, "user"+strconv.Itoa(i)))
	}
	for limit, want := range map[string]struct {
		n         int
		truncated bool
	}{"2": {2, true}, "5": {5, false}, "100000": {5, false}} {
		status, _, out := l.call(t, "GET", "/policies/api/keys?limit="+limit, "")
		require.Equal(t, http.StatusOK, status)
		assert.Len(t, out["keys"], want.n, limit)
		assert.Equal(t, want.truncated, out["truncated"], limit)
	}
}

// While Redis does not answer, a key's state, the keys and the writes are
// answered 503 with a problem naming the failure, at once.
func TestRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	l := newLimits(t, rdb, admin.WritableHandler)
	status, _, _ := l.call(t, "GET", "/policies", "")
	assert.Equal(t, http.StatusOK, status, "the policies need no Redis")
	for _, c := range []struct{ method, path, body string }{
		{"GET", keyPath("api", "alice"), ""},
		{"GET", keyPath("exports", "alice"), ""},
		{"GET", "/policies/api/keys", ""},
		{"POST", keyPath("api", "alice") + "/reset", ""},
		{"GET", keyPath("api", "alice") + "/override", ""},
		{"PUT", keyPath("api", "alice") + "/override", `{"limit": 10}`},
		{"DELETE", keyPath("api", "alice") + "/override", ""},
	} {
		detail := problem(t, l, http.StatusServiceUnavailable, c.method, c.path, c.body)
		assert.Contains(t, detail, addr, "%s %s", c.method, c.path)
	}
}

// A nil policy, or two of one name, is a programming mistake: Handler
// panics at once, naming it.
func TestHandlerPanics(t *testing.T) {
	c, err := core.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	require.NoError(t, err)
	p := policy.MustNew(c, "api", core.PerMinute(1))
	assert.PanicsWithValue(t, "admin: a nil *policy.Policy", func() { admin.Handler(p, nil) })
	assert.PanicsWithValue(t, `admin: two policies named "api": give each once`, func() { admin.WritableHandler(p, p) })
}
