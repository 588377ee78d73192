package keyfunc_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/internal/escaped"
	"github.com/redlimit/redlimit/keyfunc"
)

// fakeReq is a minimal keyfunc.Request.
type fakeReq struct {
	route    string
	routeErr error
	remote   string
	headers  http.Header
	query    map[string]string
	values   map[any]any

	headerCalls int // calls to Header and HeaderValues
}

func (r *fakeReq) Context() context.Context { return context.Background() }
func (r *fakeReq) Route() (string, error)   { return r.route, r.routeErr }
func (r *fakeReq) Header(name string) string {
	r.headerCalls++
	return r.headers.Get(name)
}
func (r *fakeReq) HeaderValues(name string) []string {
	r.headerCalls++
	return r.headers.Values(name)
}
func (r *fakeReq) Query(name string) string { return r.query[name] }
func (r *fakeReq) RemoteAddr() string       { return r.remote }
func (r *fakeReq) Value(key any) any        { return r.values[key] }

// newReq returns a request from remote with headers given as name, value
// pairs; repeated names give several header lines.
func newReq(remote string, headerPairs ...string) *fakeReq {
	r := &fakeReq{remote: remote, headers: http.Header{}, query: map[string]string{}, values: map[any]any{}}
	for i := 0; i+1 < len(headerPairs); i += 2 {
		r.headers.Add(headerPairs[i], headerPairs[i+1])
	}
	return r
}

// key runs fn on r and returns the key.
func key(t *testing.T, fn keyfunc.KeyFunc, r keyfunc.Request) string {
	t.Helper()
	k, err := fn(r)
	require.NoError(t, err)
	require.NotEmpty(t, k)
	return k
}

// requireNoKey checks that fn fails on r with ErrNoKey and no key.
func requireNoKey(t *testing.T, fn keyfunc.KeyFunc, r keyfunc.Request) {
	t.Helper()
	k, err := fn(r)
	require.ErrorIs(t, err, keyfunc.ErrNoKey)
	assert.True(t, strings.HasPrefix(err.Error(), "keyfunc: "), err.Error())
	assert.Empty(t, k)
}

// checkPart checks the alphabet of escaped values: [A-Za-z0-9._-] and %XX
// escapes, or a hashed form.
func checkPart(p string) error {
	if p == "" {
		return errors.New("empty part")
	}
	if p[0] == '~' {
		if len(p) != 23 {
			return fmt.Errorf("hashed part %q has length %d", p, len(p))
		}
		if _, err := base64.RawURLEncoding.DecodeString(p[1:]); err != nil {
			return fmt.Errorf("hashed part %q: %v", p, err)
		}
		return nil
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		case c == '%' && i+2 < len(p) && isUpperHex(p[i+1]) && isUpperHex(p[i+2]):
			i += 2
		default:
			return fmt.Errorf("part %q has byte %q at %d", p, c, i)
		}
	}
	return nil
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

// unescape inverts Escape for parts that are not hashed.
func unescape(p string) (string, error) {
	v, _, err := escaped.Unescape(p)
	return v, err
}

// hashed returns the hashed form of a value: '~' and base64url of the first
// 16 bytes of its SHA-256 digest.
func hashed(s string) string { return "~" + digest(s) }

// digest returns base64url of the first 16 bytes of the SHA-256 of s.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

type stringer string

func (s stringer) String() string { return "S" + string(s) }

type namedString string

func TestUser(t *testing.T) {
	type ctxKey struct{}
	tests := []struct {
		name  string
		value any
		want  string // "" means ErrNoKey
	}{
		{"string", "alice", "alice"},
		{"raw", "a:b{c}*", "a:b{c}*"},
		{"stringer", stringer("x:1"), "Sx:1"},
		{"int", 42, "42"},
		{"negative int", -7, "-7"},
		{"int8", int8(-8), "-8"},
		{"int16", int16(16), "16"},
		{"int32", int32(32), "32"},
		{"int64", int64(1) << 62, "4611686018427387904"},
		{"uint", uint(7), "7"},
		{"uint8", uint8(255), "255"},
		{"uint16", uint16(16), "16"},
		{"uint32", uint32(32), "32"},
		{"uint64", uint64(18446744073709551615), "18446744073709551615"},
		{"long", strings.Repeat("u", 65), strings.Repeat("u", 65)},
		{"missing", nil, ""},
		{"empty string", "", ""},
		{"float", 1.5, ""},
		{"bytes", []byte("alice"), ""},
		{"named string", namedString("alice"), ""},
		{"struct", struct{}{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []any{"user", ctxKey{}} {
				r := newReq("192.0.2.1:1")
				if tt.value != nil {
					r.values[k] = tt.value
				}
				fn := keyfunc.User(k)
				if tt.want == "" {
					requireNoKey(t, fn, r)
					continue
				}
				assert.Equal(t, tt.want, key(t, fn, r))
			}
		})
	}
}

type emptyStringer struct{}

func (emptyStringer) String() string { return "" }

func TestUserEmptyStringer(t *testing.T) {
	r := newReq("192.0.2.1:1")
	r.values["user"] = emptyStringer{}
	requireNoKey(t, keyfunc.User("user"), r)
}

func TestStatic(t *testing.T) {
	r := newReq("192.0.2.1:1")
	assert.Equal(t, "global", key(t, keyfunc.Static("global"), r))
	assert.Equal(t, "a:b{}", key(t, keyfunc.Static("a:b{}"), r))
	requireNoKey(t, keyfunc.Static(""), r)
}

func TestHeader(t *testing.T) {
	fn := keyfunc.Header("X-Tenant")
	assert.Equal(t, "acme", key(t, fn, newReq("192.0.2.1:1", "X-Tenant", "acme")))
	assert.Equal(t, "a:b", key(t, fn, newReq("192.0.2.1:1", "x-tenant", "a:b")))
	assert.Equal(t, "first", key(t, fn, newReq("192.0.2.1:1", "X-Tenant", "first", "X-Tenant", "second")))
	requireNoKey(t, fn, newReq("192.0.2.1:1"))
	requireNoKey(t, fn, newReq("192.0.2.1:1", "X-Tenant", ""))
	_, err := fn(newReq("192.0.2.1:1"))
	assert.Contains(t, err.Error(), "X-Tenant")
}

// The route as registered is the key: the route's method, HEAD with GET,
// the methods outside the standard set as one, a route of every method
// with one key.
func TestRoute(t *testing.T) {
	tests := []struct {
		name, route, want string
	}{
		{"gin template", "GET /users/:id", "GET /users/:id"},
		{"mux pattern", "POST /users/{id}", "POST /users/{id}"},
		{"wildcard", "GET /static/*filepath", "GET /static/*filepath"},
		{"HEAD counts with GET", "HEAD /users/:id", "GET /users/:id"},
		{"a method outside the standard set", "PURGE /cache", "OTHER /cache"},
		{"another one", "BREW /cache", "OTHER /cache"},
		{"a lower-case method", "get /cache", "OTHER /cache"},
		{"a pattern of every method", "/users/{id}", "/users/{id}"},
		{"a pattern with a host", "GET example.com/users/{id}", "GET example.com/users/{id}"},
		{"a gRPC method", "/pkg.Service/Method", "/pkg.Service/Method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReq("192.0.2.1:1")
			r.route = tt.route
			assert.Equal(t, tt.want, key(t, keyfunc.Route(), r))
		})
	}
	requireNoKey(t, keyfunc.Route(), newReq("192.0.2.1:1"))

	// Where the framework cannot know the route: its error, not a missing
	// key.
	r := newReq("192.0.2.1:1")
	r.routeErr = fmt.Errorf("%w: put the middleware on the route", keyfunc.ErrRouteUnknown)
	_, err := keyfunc.Route()(r)
	require.ErrorIs(t, err, keyfunc.ErrRouteUnknown)
	assert.NotErrorIs(t, err, keyfunc.ErrNoKey)
	assert.Contains(t, err.Error(), "put the middleware on the route")
}

func TestAPIKey(t *testing.T) {
	const apiKey = "sk_live_0123456789abcdef0123456789abcdef"
	r := newReq("192.0.2.1:1", "X-API-Key", apiKey)
	r.query["api_key"] = apiKey

	plain := key(t, keyfunc.APIKey("X-API-Key"), r)
	assert.Equal(t, digest(apiKey), plain)
	assert.Equal(t, plain, key(t, keyfunc.APIKeyQuery("api_key"), r))

	secret := []byte("server secret")
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(apiKey))
	wantMAC := base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
	keyed := key(t, keyfunc.APIKey("X-API-Key", keyfunc.WithSecret(secret)), r)
	assert.Equal(t, wantMAC, keyed)
	assert.Equal(t, keyed, key(t, keyfunc.APIKeyQuery("api_key", keyfunc.WithSecret(secret)), r))

	other := key(t, keyfunc.APIKey("X-API-Key", keyfunc.WithSecret([]byte("other secret"))), r)
	assert.NotEqual(t, keyed, other)
	assert.NotEqual(t, plain, keyed)
	assert.Equal(t, plain, key(t, keyfunc.APIKey("X-API-Key", keyfunc.WithSecret(nil)), r), "empty secret")

	for _, got := range []string{plain, keyed, other} {
		assert.Len(t, got, 22)
		assert.Equal(t, got, keyfunc.Escape(got), "the digest needs no escaping")
		assert.NotContains(t, got, apiKey[:12])
	}

	// The secret is copied.
	s := []byte("mutable")
	fn := keyfunc.APIKey("X-API-Key", keyfunc.WithSecret(s))
	before := key(t, fn, r)
	s[0] = 'X'
	assert.Equal(t, before, key(t, fn, r))

	requireNoKey(t, keyfunc.APIKey("X-API-Key"), newReq("192.0.2.1:1"))
	requireNoKey(t, keyfunc.APIKey("X-API-Key", keyfunc.WithSecret(secret)), newReq("192.0.2.1:1", "X-API-Key", ""))
	requireNoKey(t, keyfunc.APIKeyQuery("api_key"), newReq("192.0.2.1:1"))
}

func TestJoin(t *testing.T) {
	r := newReq("192.0.2.1:1")
	r.route = "GET /users/:id"
	r.values["user"] = "alice"

	fn := keyfunc.Join(keyfunc.Static("api"), keyfunc.User("user"), keyfunc.Route())
	assert.Equal(t, "api:alice:GET%20%2Fusers%2F%3Aid", key(t, fn, r), "each part escaped")
	assert.Equal(t, "alice", key(t, keyfunc.Join(keyfunc.User("user")), r))

	// Any failing part fails the whole key.
	requireNoKey(t, keyfunc.Join(keyfunc.Static("api"), keyfunc.User("nobody")), r)
	requireNoKey(t, keyfunc.Join(keyfunc.User("user"), keyfunc.Header("X-Missing")), r)
	errBoom := errors.New("boom")
	_, err := keyfunc.Join(keyfunc.Static("a"), func(keyfunc.Request) (string, error) { return "", errBoom })(r)
	require.ErrorIs(t, err, errBoom)

	// A hand-written KeyFunc that returns an empty key gives no key.
	empty := func(keyfunc.Request) (string, error) { return "", nil }
	requireNoKey(t, keyfunc.Join(keyfunc.Static("a"), empty), r)
	requireNoKey(t, keyfunc.Join(), r)

	assert.PanicsWithValue(t, "keyfunc: nil function passed to Join", func() { keyfunc.Join(keyfunc.IP(), nil) })
}

func TestFallback(t *testing.T) {
	anon := newReq("192.0.2.1:1")
	user := newReq("192.0.2.1:1")
	user.values["user"] = "alice"

	fn := keyfunc.Fallback(keyfunc.User("user"), keyfunc.IP())
	assert.Equal(t, "alice", key(t, fn, user))
	assert.Equal(t, "192.0.2.1", key(t, fn, anon))

	// All fail: the last error, still an ErrNoKey.
	both := keyfunc.Fallback(keyfunc.User("user"), keyfunc.Header("X-User"))
	_, err := both(anon)
	require.ErrorIs(t, err, keyfunc.ErrNoKey)
	assert.Contains(t, err.Error(), "X-User")

	// An error that is not a missing key is returned at once.
	errBoom := errors.New("boom")
	calls := 0
	count := func(keyfunc.Request) (string, error) { calls++; return "x", nil }
	_, err = keyfunc.Fallback(keyfunc.User("user"), func(keyfunc.Request) (string, error) { return "", errBoom }, count)(anon)
	require.ErrorIs(t, err, errBoom)
	assert.NotErrorIs(t, err, keyfunc.ErrNoKey)
	assert.Zero(t, calls)

	empty := func(keyfunc.Request) (string, error) { return "", nil }
	assert.Equal(t, "ok", key(t, keyfunc.Fallback(empty, keyfunc.Static("ok")), anon))
	requireNoKey(t, keyfunc.Fallback(empty), anon)
	requireNoKey(t, keyfunc.Fallback(), anon)

	assert.Panics(t, func() { keyfunc.Fallback(nil) })
}

// TestFallbackTagged shows the documented way to keep users and addresses
// apart when a user identifier may look like an address.
func TestFallbackTagged(t *testing.T) {
	user := newReq("192.0.2.1:1")
	user.values["user"] = "192.0.2.1"
	anon := newReq("192.0.2.1:1")

	untagged := keyfunc.Fallback(keyfunc.User("user"), keyfunc.IP())
	assert.Equal(t, key(t, untagged, user), key(t, untagged, anon), "documented caveat")

	tagged := keyfunc.Fallback(
		keyfunc.Join(keyfunc.Static("user"), keyfunc.User("user")),
		keyfunc.Join(keyfunc.Static("ip"), keyfunc.IP()),
	)
	assert.Equal(t, "user:192.0.2.1", key(t, tagged, user))
	assert.Equal(t, "ip:192.0.2.1", key(t, tagged, anon))
	assert.NotEqual(t, key(t, tagged, user), key(t, tagged, anon))
}

// TestJoinNoCollisions builds keys from users, methods and routes full of
// separators and brace characters, and checks that different inputs never
// give the same key, and that each key decodes back to its inputs.
func TestJoinNoCollisions(t *testing.T) {
	users := []string{
		"a", "a:GET", "a:GET%20", "a%3AGET", "a:", ":a", "a::b", "{a}", "{a", "a}", "*", "a*",
		"a~", "~a", "a%", "%", "%25", "a b", "a\x00", "a\n", "é", "a:GET /x", "GET",
		strings.Repeat("x", 64), strings.Repeat("x", 65), strings.Repeat(":", 65),
	}
	routes := []string{"GET /x", "GET :/x", "/x", "GET:/x", "GET /{id}", "GET /*", "POST /x", "GET /x:GET", "OTHER /x"}
	fn := keyfunc.Join(keyfunc.User("user"), keyfunc.Route())
	seen := map[string][2]string{}
	for _, u := range users {
		for _, rt := range routes {
			r := newReq("192.0.2.1:1")
			r.values["user"] = u
			r.route = rt
			k := key(t, fn, r)
			in := [2]string{u, rt}
			if prev, ok := seen[k]; ok {
				t.Fatalf("key %q for both %q and %q", k, prev, in)
			}
			seen[k] = in
			assert.NotContains(t, k, "{")
			assert.NotContains(t, k, "}")
			assert.NotContains(t, k, "*")

			parts := strings.Split(k, ":")
			require.Len(t, parts, 2, k)
			for _, p := range parts {
				require.NoError(t, checkPart(p))
			}
			for i, want := range []string{u, rt} {
				if len(want) > 64 {
					assert.Equal(t, hashed(want), parts[i])
					continue
				}
				got, err := unescape(parts[i])
				require.NoError(t, err)
				assert.Equal(t, want, got)
			}
		}
	}

	// Two users joined: the ':' inside a value never acts as a separator.
	two := keyfunc.Join(keyfunc.User("a"), keyfunc.User("b"))
	r1, r2 := newReq("192.0.2.1:1"), newReq("192.0.2.1:1")
	r1.values["a"], r1.values["b"] = "x:y", "z"
	r2.values["a"], r2.values["b"] = "x", "y:z"
	assert.NotEqual(t, key(t, two, r1), key(t, two, r2))
}
