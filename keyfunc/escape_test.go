package keyfunc_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/keyfunc"
)

func TestEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"abcXYZ019._-", "abcXYZ019._-"},
		{"a:b", "a%3Ab"},
		{"{tag}", "%7Btag%7D"},
		{"*", "%2A"},
		{"%", "%25"},
		{"%3A", "%253A"},
		{"~", "%7E"},
		{"a b", "a%20b"},
		{"/", "%2F"},
		{"\x00\x1f\x7f", "%00%1F%7F"},
		{"\xff", "%FF"},
		{"é", "%C3%A9"},
		{"用户", "%E7%94%A8%E6%88%B7"},
		{"\r\n", "%0D%0A"},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{strings.Repeat(":", 64), strings.Repeat("%3A", 64)},
		{strings.Repeat("a", 65), hashed(strings.Repeat("a", 65))},
		{strings.Repeat(":", 65), hashed(strings.Repeat(":", 65))},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, keyfunc.Escape(tt.in), "%q", tt.in)
		if tt.in != "" {
			require.NoError(t, checkPart(tt.want))
		}
	}
}

// TestEscapeInjective checks that values chosen to look alike all
// give different parts, and that escaped parts decode back.
func TestEscapeInjective(t *testing.T) {
	values := []string{
		"", "a", "A", "a:", ":a", "a:b", "a%3Ab", "a%3ab", "a%253Ab", "a{b}", "a%7Bb%7D", "{", "}", "{}",
		"*", "%2A", "%", "%25", "~", "%7E", "~abc", " ", "%20", "+", "\x00", "%00", "\t", "é", "e\u0301",
		"\xc3", "\xa9", "\xc3\xa9\xc3", "a\x00b", "a\nb", "user:1", "user%3A1", "user", "1",
		strings.Repeat("z", 64), strings.Repeat("z", 65), strings.Repeat("z", 66),
		hashed(strings.Repeat("z", 65)), hashed(strings.Repeat("z", 65))[1:],
	}
	seen := map[string]string{}
	for _, v := range values {
		got := keyfunc.Escape(v)
		if prev, ok := seen[got]; ok {
			t.Fatalf("%q and %q both give %q", prev, v, got)
		}
		seen[got] = v
		for _, c := range []string{":", "{", "}", "*", " "} {
			assert.NotContains(t, got, c, "%q", v)
		}
		if len(v) > 64 {
			assert.True(t, strings.HasPrefix(got, "~"))
			continue
		}
		assert.NotContains(t, got, "~")
		back, err := unescape(got)
		require.NoError(t, err)
		assert.Equal(t, v, back)
	}
}

// TestAllocations checks what the key functions allocate: a key that is
// the request's own string (a user, or an IPv4 peer's address as
// RemoteAddr spells it) costs nothing; a formatted address (an IPv6
// prefix, a forwarded client), a digest or a joined key costs its string.
func TestAllocations(t *testing.T) {
	user := newReq("192.0.2.1:1234")
	user.values["user"] = "alice"
	user.route = "GET /users/:id"
	anon := newReq("192.0.2.1:1234")
	v6 := newReq("[2001:db8:1:2::3]:1234")
	mapped := newReq("[::ffff:192.0.2.1]:1234")
	proxied := newReq("10.0.0.2:1", "X-Forwarded-For", "198.51.100.9, 203.0.113.7, 10.0.0.1")
	// Canonical header names: http.Header allocates to canonicalize others,
	// which is the fake request's cost, not the key function's.
	apiKey := newReq("192.0.2.1:1", "X-Api-Key", "sk_live_0123456789abcdef0123456789abcdef")

	tests := []struct {
		name   string
		fn     keyfunc.KeyFunc
		r      keyfunc.Request
		allocs float64
	}{
		{"IP ipv4", keyfunc.IP(), anon, 0},
		{"IP ipv4-mapped", keyfunc.IP(), mapped, 1},
		{"IP ipv6", keyfunc.IP(), v6, 1},
		{"IP X-Forwarded-For", keyfunc.IP(keyfunc.TrustProxies(trusted...)), proxied, 1},
		{"User", keyfunc.User("user"), user, 0},
		{"Static", keyfunc.Static("global"), anon, 0},
		{"Route", keyfunc.Route(), user, 1},
		{"APIKey", keyfunc.APIKey("X-Api-Key"), apiKey, 2},
		{"Fallback to IP", keyfunc.Fallback(keyfunc.User("user"), keyfunc.IP()), anon, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			allocs := testing.AllocsPerRun(100, func() { _, err = tt.fn(tt.r) })
			require.NoError(t, err)
			assert.Equal(t, tt.allocs, allocs)
		})
	}
	t.Run("Escape", func(t *testing.T) {
		assert.Zero(t, testing.AllocsPerRun(100, func() { _ = keyfunc.Escape("alice.example-1_x") }), "nothing to escape")
		assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = keyfunc.Escape("a:b{c}*~ é") }))
	})
	t.Run("ClientIP", func(t *testing.T) {
		lines := []string{"198.51.100.9", "203.0.113.7, 10.0.0.1"}
		var a netip.Addr
		assert.Zero(t, testing.AllocsPerRun(100, func() {
			a, _ = keyfunc.ClientIP("10.0.0.2:1", lines, trusted, "X-Forwarded-For")
		}))
		assert.Equal(t, netip.MustParseAddr("203.0.113.7"), a)
	})
}

func BenchmarkIP(b *testing.B) {
	r := newReq("10.0.0.2:1", "X-Forwarded-For", "198.51.100.9, 203.0.113.7, 10.0.0.1")
	for _, bc := range []struct {
		name string
		fn   keyfunc.KeyFunc
	}{
		{"peer", keyfunc.IP()},
		{"X-Forwarded-For", keyfunc.IP(keyfunc.TrustProxies(trusted...))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = bc.fn(r)
			}
		})
	}
}

func BenchmarkJoin(b *testing.B) {
	r := newReq("192.0.2.1:1", "X-Api-Key", "sk_live_0123456789abcdef0123456789abcdef")
	r.route = "GET /users/:id"
	fn := keyfunc.Join(keyfunc.Route(), keyfunc.Fallback(keyfunc.User("user"), keyfunc.APIKey("X-Api-Key", keyfunc.WithSecret([]byte("s")))))
	b.ReportAllocs()
	for b.Loop() {
		_, _ = fn(r)
	}
}
