package keyfunc_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/keyfunc"
)

var trusted = mustPrefixes("10.0.0.0/8", "2001:db8:ffff::/48")

func mustPrefixes(s ...string) []netip.Prefix {
	p, err := keyfunc.ParsePrefixes(s...)
	if err != nil {
		panic(err)
	}
	return p
}

func TestClientIPPeer(t *testing.T) {
	tests := []struct {
		peer, want string // want "" means ErrNoKey
	}{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"192.0.2.1", "192.0.2.1"},
		{"192.0.2.1:0", "192.0.2.1"},
		{"192.0.2.1:65535", "192.0.2.1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"2001:db8::1", "2001:db8::1"},
		{"::1", "::1"},
		{"[::1]:80", "::1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"[fe80::1%eth0]:80", "fe80::1"},
		{"fe80::1%eth0", "fe80::1"},
		{"[::ffff:192.0.2.1%eth0]:80", "192.0.2.1"},
		{"", ""},
		{"localhost:80", ""},
		{"example.com", ""},
		{"192.0.2.1:", ""},
		{"192.0.2.1:65536", ""},
		{"192.0.2.1:http", ""},
		{"192.0.2.1:-1", ""},
		{"[192.0.2.1]:80", ""},
		{"[2001:db8::1", ""},
		{"[2001:db8::1]x", ""},
		{"[2001:db8::1]:", ""},
		{"[]:80", ""},
		{"192.0.2.1%eth0", ""},
		{"01.2.3.4", ""},
		{"1.2.3", ""},
		{" 192.0.2.1", ""},
		{"@", ""},
		{"pipe", ""},
		{"192.0.2.1:80:80", ""},
	}
	for _, tt := range tests {
		t.Run(tt.peer, func(t *testing.T) {
			got, err := keyfunc.ClientIP(tt.peer, nil, nil, "")
			if tt.want == "" {
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				requireNoKey(t, keyfunc.IP(), newReq(tt.peer))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddr(tt.want), got)
			assert.Equal(t, "", got.Zone())
			// The key is the address's canonical text (or, for IPv6, its
			// /64 prefix), also where it is the peer's own text.
			want := got.String()
			if got.Is6() {
				want = netip.PrefixFrom(got, 64).Masked().String()
			}
			key, err := keyfunc.IP()(newReq(tt.peer))
			require.NoError(t, err)
			assert.Equal(t, want, key)
		})
	}
}

func TestIPKey(t *testing.T) {
	tests := []struct {
		name string
		opts []keyfunc.IPOption
		peer string
		want string
	}{
		{"ipv4", nil, "192.0.2.1:1234", "192.0.2.1"},
		{"ipv4 bare", nil, "192.0.2.1", "192.0.2.1"},
		{"mapped ipv4", nil, "[::ffff:192.0.2.1]:1", "192.0.2.1"},
		{"ipv6 /64", nil, "[2001:db8:1:2:3:4:5:6]:1", "2001:db8:1:2::/64"},
		{"ipv6 zone", nil, "[fe80::1%eth0]:1", "fe80::/64"},
		{"ipv4 /24", []keyfunc.IPOption{keyfunc.IPv4PrefixLen(24)}, "192.0.2.77:1", "192.0.2.0/24"},
		{"ipv4 /0", []keyfunc.IPOption{keyfunc.IPv4PrefixLen(0)}, "192.0.2.77:1", "0.0.0.0/0"},
		{"ipv4 clamped high", []keyfunc.IPOption{keyfunc.IPv4PrefixLen(99)}, "192.0.2.77:1", "192.0.2.77"},
		{"ipv4 clamped low", []keyfunc.IPOption{keyfunc.IPv4PrefixLen(-5)}, "192.0.2.77:1", "0.0.0.0/0"},
		{"ipv6 /48", []keyfunc.IPOption{keyfunc.IPv6PrefixLen(48)}, "[2001:db8:1:2::9]:1", "2001:db8:1::/48"},
		{"ipv6 /128", []keyfunc.IPOption{keyfunc.IPv6PrefixLen(128)}, "[2001:db8::9]:1", "2001:db8::9/128"},
		{"ipv6 clamped high", []keyfunc.IPOption{keyfunc.IPv6PrefixLen(1000)}, "[2001:db8::9]:1", "2001:db8::9/128"},
		{"ipv6 clamped low", []keyfunc.IPOption{keyfunc.IPv6PrefixLen(-1)}, "[2001:db8::9]:1", "::/0"},
		{"ipv6 prefix len leaves ipv4 alone", []keyfunc.IPOption{keyfunc.IPv6PrefixLen(48)}, "192.0.2.1:1", "192.0.2.1"},
		{"nil option", []keyfunc.IPOption{nil}, "192.0.2.1:1", "192.0.2.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, key(t, keyfunc.IP(tt.opts...), newReq(tt.peer)))
			// The same peer given parsed, as the fiber adapters give it:
			// RemoteAddr is not read.
			if ap, err := netip.ParseAddrPort(tt.peer); err == nil {
				assert.Equal(t, tt.want, key(t, keyfunc.IP(tt.opts...), portReq{newReq("not read"), ap}))
			}
		})
	}
	t.Run("no parsed peer", func(t *testing.T) {
		assert.Equal(t, "192.0.2.1", key(t, keyfunc.IP(), portReq{newReq("192.0.2.1:1"), netip.AddrPort{}}))
	})
}

// portReq gives its peer parsed too, as a fasthttp adapter does.
type portReq struct {
	*fakeReq
	peer netip.AddrPort
}

func (r portReq) RemoteAddrPort() netip.AddrPort { return r.peer }

func TestIPv6Grouping(t *testing.T) {
	fn := keyfunc.IP()
	a := key(t, fn, newReq("[2001:db8:1:2::1]:1"))
	b := key(t, fn, newReq("[2001:db8:1:2:ffff:ffff:ffff:ffff]:2"))
	c := key(t, fn, newReq("[2001:db8:1:3::1]:1"))
	assert.Equal(t, a, b, "same /64")
	assert.NotEqual(t, a, c, "different /64")

	// IPv4 and IPv6 forms, and prefixes of different lengths, never meet.
	seen := map[string]string{}
	for _, tc := range []struct {
		opt  keyfunc.IPOption
		peer string
	}{
		{keyfunc.IPv4PrefixLen(32), "0.0.0.0"},
		{keyfunc.IPv4PrefixLen(0), "0.0.0.0"},
		{keyfunc.IPv4PrefixLen(8), "0.0.0.0"},
		{keyfunc.IPv6PrefixLen(0), "::"},
		{keyfunc.IPv6PrefixLen(64), "::"},
		{keyfunc.IPv6PrefixLen(128), "::"},
		{keyfunc.IPv6PrefixLen(96), "::ffff:0:0"}, // a real IPv6 peer: unmapped to 0.0.0.0
		{keyfunc.IPv6PrefixLen(128), "::1.2.3.4"},
		{keyfunc.IPv4PrefixLen(32), "1.2.3.4"},
	} {
		k := key(t, keyfunc.IP(tc.opt), newReq(tc.peer))
		if tc.peer == "::ffff:0:0" {
			assert.Equal(t, "0.0.0.0", k)
			continue
		}
		if prev, ok := seen[k]; ok {
			t.Fatalf("%q: key %q also for %q", tc.peer, k, prev)
		}
		seen[k] = tc.peer
	}
}

func TestUntrustedPeerIgnoresHeaders(t *testing.T) {
	spoof := []string{
		"X-Forwarded-For", "203.0.113.7",
		"X-Forwarded-For", "198.51.100.1, 10.0.0.1",
		"Forwarded", "for=203.0.113.7",
		"X-Real-IP", "203.0.113.7",
	}
	for _, header := range []string{"", "X-Forwarded-For", "Forwarded", "X-Real-IP", "CF-Connecting-IP"} {
		for _, tr := range [][]netip.Prefix{nil, trusted} {
			for _, peer := range []string{"192.0.2.1:1", "[2001:db8::1]:1"} {
				r := newReq(peer, spoof...)
				opts := []keyfunc.IPOption{keyfunc.TrustProxies(tr...)}
				if header != "" {
					opts = append(opts, keyfunc.ForwardedHeader(header))
				}
				want := key(t, keyfunc.IP(), newReq(peer))
				assert.Equal(t, want, key(t, keyfunc.IP(opts...), r), "%s via %q", peer, header)
				assert.Zero(t, r.headerCalls, "headers are not even read")

				got, err := keyfunc.ClientIP(peer, r.headers.Values(header), tr, header)
				require.NoError(t, err)
				assert.Equal(t, netip.MustParseAddrPort(peer).Addr(), got)
			}
		}
	}
}

func TestClientIPTrusted(t *testing.T) {
	tests := []struct {
		name  string
		peer  string
		lines []string
		want  string // "" means ErrNoKey
	}{
		{"no header", "10.0.0.1:1", nil, "10.0.0.1"},
		{"empty header", "10.0.0.1:1", []string{""}, "10.0.0.1"},
		{"only separators", "10.0.0.1:1", []string{" , ,\t"}, "10.0.0.1"},
		{"one hop", "10.0.0.1:1", []string{"203.0.113.7"}, "203.0.113.7"},
		{"client spoofs a prefix", "10.0.0.1:1", []string{"198.51.100.9, 203.0.113.7"}, "203.0.113.7"},
		{"two proxies", "10.0.0.2:1", []string{"198.51.100.9, 203.0.113.7, 10.0.0.1"}, "203.0.113.7"},
		{"several lines", "10.0.0.2:1", []string{"198.51.100.9", "203.0.113.7, 10.0.0.1"}, "203.0.113.7"},
		{"several lines, split after client", "10.0.0.2:1", []string{"198.51.100.9, 203.0.113.7", "10.0.0.1"}, "203.0.113.7"},
		{"empty line between", "10.0.0.2:1", []string{"203.0.113.7", "", "10.0.0.1"}, "203.0.113.7"},
		{"empty entries", "10.0.0.2:1", []string{"203.0.113.7,,10.0.0.1,"}, "203.0.113.7"},
		{"all trusted: leftmost", "10.0.0.2:1", []string{"10.0.0.5, 10.0.0.1"}, "10.0.0.5"},
		{"all trusted over lines", "10.0.0.2:1", []string{"10.0.0.9", "10.0.0.5, 10.0.0.1"}, "10.0.0.9"},
		{"garbage left of client", "10.0.0.2:1", []string{"<script>, unknown, 203.0.113.7, 10.0.0.1"}, "203.0.113.7"},
		{"garbage line left of client", "10.0.0.2:1", []string{"\x00\xff\"", "203.0.113.7"}, "203.0.113.7"},
		{"garbage at client", "10.0.0.2:1", []string{"203.0.113.7, garbage, 10.0.0.1"}, ""},
		{"unknown at client", "10.0.0.2:1", []string{"unknown"}, ""},
		{"hostname at client", "10.0.0.2:1", []string{"proxy.example, 10.0.0.1"}, ""},
		{"ipv4 port", "10.0.0.1:1", []string{"203.0.113.7:5678"}, "203.0.113.7"},
		{"ipv6 port", "10.0.0.1:1", []string{"[2001:db8::1]:80"}, "2001:db8::1"},
		{"ipv6 bare", "10.0.0.1:1", []string{"2001:db8::1"}, "2001:db8::1"},
		{"ipv6 brackets", "10.0.0.1:1", []string{"[2001:db8::1]"}, "2001:db8::1"},
		{"mapped", "10.0.0.1:1", []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"mapped trusted proxy skipped", "10.0.0.1:1", []string{"203.0.113.7, ::ffff:10.0.0.3"}, "203.0.113.7"},
		{"zone", "10.0.0.1:1", []string{"fe80::1%eth0"}, "fe80::1"},
		{"trusted ipv6 proxy", "[2001:db8:ffff::1]:1", []string{"203.0.113.7, 2001:db8:ffff::2"}, "203.0.113.7"},
		{"trusted mapped peer", "[::ffff:10.0.0.1]:1", []string{"203.0.113.7"}, "203.0.113.7"},
		{"tabs and spaces", "10.0.0.1:1", []string{"\t203.0.113.7 ,\t10.0.0.3 "}, "203.0.113.7"},
		{"bad port at client", "10.0.0.1:1", []string{"203.0.113.7:99999"}, ""},
		{"quoted in xff", "10.0.0.1:1", []string{`"203.0.113.7"`}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyfunc.ClientIP(tt.peer, tt.lines, trusted, "X-Forwarded-For")
			r := newReq(tt.peer)
			for _, l := range tt.lines {
				r.headers.Add("X-Forwarded-For", l)
			}
			fn := keyfunc.IP(keyfunc.TrustProxies(trusted...))
			if tt.want == "" {
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				requireNoKey(t, fn, r)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddr(tt.want), got)
			assert.Equal(t, key(t, keyfunc.IP(), newReq(tt.want)), key(t, fn, r))
		})
	}
}

func TestClientIPForwarded(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  string // "" means ErrNoKey
	}{
		{"plain", []string{"for=203.0.113.7"}, "203.0.113.7"},
		{"quoted ipv4", []string{`for="203.0.113.7"`}, "203.0.113.7"},
		{"quoted ipv6 with port", []string{`for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"quoted ipv6", []string{`for="[2001:db8:cafe::17]"`}, "2001:db8:cafe::17"},
		{"unquoted ipv6 accepted", []string{`for=[2001:db8:cafe::17]:4711`}, "2001:db8:cafe::17"},
		{"obfuscated port", []string{`for="[2001:db8:cafe::17]:_p1"`}, "2001:db8:cafe::17"},
		{"ipv4 with port", []string{`for="203.0.113.7:80"`}, "203.0.113.7"},
		{"elements", []string{"for=198.51.100.9, for=203.0.113.7, for=10.0.0.1"}, "203.0.113.7"},
		{"lines", []string{"for=198.51.100.9", "for=203.0.113.7;proto=https", "for=10.0.0.1"}, "203.0.113.7"},
		{"params before", []string{"proto=https;by=10.0.0.2;for=203.0.113.7;host=example.com"}, "203.0.113.7"},
		{"case-insensitive", []string{"For=203.0.113.7", "FOR=10.0.0.1"}, "203.0.113.7"},
		{"spaces", []string{" for=203.0.113.7 ; proto=https ,\tfor=10.0.0.1 "}, "203.0.113.7"},
		{"trailing semicolon", []string{"for=203.0.113.7;"}, "203.0.113.7"},
		{"quoted comma in another param", []string{`for=203.0.113.7;ext="a,b", for=10.0.0.1`}, "203.0.113.7"},
		{"escaped quote in another param", []string{`for=203.0.113.7;ext="a\",b", for=10.0.0.1`}, "203.0.113.7"},
		{"all trusted", []string{`for=10.0.0.5, for="[2001:db8:ffff::1]"`}, "10.0.0.5"},
		{"unbalanced quote left of client", []string{`for="x, for=203.0.113.7`}, "203.0.113.7"},
		{"unknown left of client", []string{"for=unknown, for=_hidden, for=203.0.113.7"}, "203.0.113.7"},
		{"unknown at client", []string{"for=unknown, for=10.0.0.1"}, ""},
		{"obfuscated at client", []string{"for=_hidden"}, ""},
		{"no for at client", []string{"proto=https, for=10.0.0.1"}, ""},
		{"two for", []string{"for=203.0.113.7;for=198.51.100.1"}, ""},
		{"empty for", []string{`for=""`}, ""},
		{"empty value", []string{"for=;proto=https"}, ""},
		{"no value", []string{"for"}, ""},
		{"unterminated quote", []string{`for="203.0.113.7`}, ""},
		{"escape in for", []string{`for="203.0.113.\7"`}, ""},
		{"garbage after value", []string{`for=203.0.113.7 x`}, ""},
		{"control char in quotes", []string{"for=\"203.0.113.7\x01\""}, ""},
		{"bad obfuscated port", []string{`for="[2001:db8::1]:_"`}, ""},
		{"bad obfuscated port char", []string{`for="[2001:db8::1]:_a b"`}, ""},
		{"obfuscated port on ipv4", []string{`for="203.0.113.7:_x"`}, "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyfunc.ClientIP("10.0.0.2:1", tt.lines, trusted, "forwarded")
			if tt.want == "" {
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddr(tt.want), got)

			r := newReq("10.0.0.2:1")
			for _, l := range tt.lines {
				r.headers.Add("Forwarded", l)
			}
			fn := keyfunc.IP(keyfunc.TrustProxies(trusted...), keyfunc.ForwardedHeader("Forwarded"))
			assert.Equal(t, key(t, keyfunc.IP(), newReq(tt.want)), key(t, fn, r))
		})
	}
}

func TestClientIPRealIP(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  string
	}{
		{"absent", nil, "10.0.0.2"},
		{"empty", []string{" "}, "10.0.0.2"},
		{"address", []string{"203.0.113.7"}, "203.0.113.7"},
		{"ipv6", []string{"2001:db8::1"}, "2001:db8::1"},
		{"with port", []string{"[2001:db8::1]:80"}, "2001:db8::1"},
		{"trusted address is used as is", []string{"10.0.0.9"}, "10.0.0.9"},
		{"last line wins", []string{"198.51.100.9", "203.0.113.7"}, "203.0.113.7"},
		{"list", []string{"198.51.100.9, 203.0.113.7"}, ""},
		{"garbage", []string{"unknown"}, ""},
		{"too long", []string{strings.Repeat(" ", 9000) + "203.0.113.7"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyfunc.ClientIP("10.0.0.2:1", tt.lines, trusted, "X-Real-IP")
			if tt.want == "" {
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddr(tt.want), got)
		})
	}
}

// TestClientIPOtherHeader checks that unknown header names use the
// X-Forwarded-For rules.
func TestClientIPOtherHeader(t *testing.T) {
	r := newReq("10.0.0.2:1", "CF-Connecting-IP", "203.0.113.7", "X-Forwarded-For", "198.51.100.1")
	fn := keyfunc.IP(keyfunc.TrustProxies(trusted...), keyfunc.ForwardedHeader("CF-Connecting-IP"))
	assert.Equal(t, "203.0.113.7", key(t, fn, r))
	// ForwardedHeader("") keeps the default.
	fn = keyfunc.IP(keyfunc.TrustProxies(trusted...), keyfunc.ForwardedHeader(""))
	assert.Equal(t, "198.51.100.1", key(t, fn, r))
}

func TestClientIPBounds(t *testing.T) {
	proxies := func(n int) string {
		return strings.TrimSuffix(strings.Repeat("10.0.0.1, ", n), ", ")
	}
	tests := []struct {
		name  string
		lines []string
		want  string // "" means ErrNoKey
	}{
		{"client after 63 proxies", []string{"203.0.113.7, " + proxies(63)}, "203.0.113.7"},
		{"client after 64 proxies", []string{"203.0.113.7, " + proxies(64)}, ""},
		{"64 trusted entries", []string{proxies(64)}, "10.0.0.1"},
		{"65 trusted entries", []string{proxies(65)}, ""},
		{"many lines", append(make([]string, 1000), "203.0.113.7"), "203.0.113.7"},
		{"many entries left of client", []string{proxies(10000) + ", 203.0.113.7"}, "203.0.113.7"},
		{"huge garbage left of client", []string{strings.Repeat("x", 1<<20) + ", 203.0.113.7"}, "203.0.113.7"},
		{"huge garbage line left of client", []string{strings.Repeat("x", 1<<20), "203.0.113.7"}, "203.0.113.7"},
		{"client beyond 8 KiB", []string{"203.0.113.7, " + strings.Repeat(" ", 8192) + "10.0.0.1"}, ""},
		{"client beyond 8 KiB over lines", []string{"203.0.113.7", strings.Repeat(" ", 8192), "10.0.0.1"}, ""},
		{"client at the 8 KiB edge", []string{"203.0.113.7," + strings.Repeat(" ", 8192-len("203.0.113.7,")-len("10.0.0.1")) + "10.0.0.1"}, "203.0.113.7"},
		{"client one byte past the edge", []string{"203.0.113.7," + strings.Repeat(" ", 8192-len("203.0.113.7,")-len("10.0.0.1")+1) + "10.0.0.1"}, ""},
		{"spaces only beyond the limit", []string{strings.Repeat(" ", 9000)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, header := range []string{"X-Forwarded-For", "Forwarded"} {
				lines := tt.lines
				if header == "Forwarded" {
					if strings.Contains(tt.name, "edge") {
						continue // depends on exact lengths
					}
					lines = toForwarded(lines)
				}
				got, err := keyfunc.ClientIP("10.0.0.2:1", lines, trusted, header)
				if tt.want == "" {
					require.ErrorIs(t, err, keyfunc.ErrNoKey, header)
					continue
				}
				require.NoError(t, err, header)
				assert.Equal(t, netip.MustParseAddr(tt.want), got, header)
			}
		})
	}
}

// toForwarded rewrites address entries of X-Forwarded-For lines as for=
// elements, keeping their lengths comparable.
func toForwarded(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(l, "10.0.0.1", "for=10.0.0.1"), "203.0.113.7", "for=203.0.113.7")
	}
	return out
}

func TestParsePrefixes(t *testing.T) {
	got, err := keyfunc.ParsePrefixes("10.0.0.0/8", " 192.168.1.7/24 ", "203.0.113.7", "2001:db8::/32", "2001:db8::1", "::ffff:10.1.0.0/112", "::ffff:192.0.2.1", "fe80::1%eth0")
	require.NoError(t, err)
	want := []string{"10.0.0.0/8", "192.168.1.0/24", "203.0.113.7/32", "2001:db8::/32", "2001:db8::1/128", "10.1.0.0/16", "192.0.2.1/32", "fe80::1/128"}
	require.Len(t, got, len(want))
	for i, w := range want {
		assert.Equal(t, netip.MustParsePrefix(w), got[i])
	}

	got, err = keyfunc.ParsePrefixes()
	require.NoError(t, err)
	assert.Empty(t, got)

	for _, bad := range []string{"", "10.0.0.0/33", "10.0.0.0/", "example.com", "10.0.0.0/8/8", "1.2.3.4.5"} {
		_, err := keyfunc.ParsePrefixes("10.0.0.0/8", bad)
		require.Error(t, err, bad)
		assert.True(t, strings.HasPrefix(err.Error(), "keyfunc: "), err.Error())
	}
}

func TestTrustProxies(t *testing.T) {
	r := newReq("10.1.2.3:1", "X-Forwarded-For", "203.0.113.7")
	// Mapped prefixes and unmasked prefixes are normalized; invalid ones
	// are ignored.
	fn := keyfunc.IP(keyfunc.TrustProxies(netip.MustParsePrefix("::ffff:10.0.0.0/104"), netip.Prefix{}))
	assert.Equal(t, "203.0.113.7", key(t, fn, r))
	fn = keyfunc.IP(keyfunc.TrustProxies(netip.MustParsePrefix("10.1.2.99/24")))
	assert.Equal(t, "203.0.113.7", key(t, fn, r))
	// Options add up.
	fn = keyfunc.IP(keyfunc.TrustProxies(netip.MustParsePrefix("192.0.2.0/24")), keyfunc.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))
	assert.Equal(t, "203.0.113.7", key(t, fn, r))
	// A zero prefix trusts nothing.
	fn = keyfunc.IP(keyfunc.TrustProxies(netip.Prefix{}))
	assert.Equal(t, "10.1.2.3", key(t, fn, r))
	// ClientIP accepts mapped prefixes as given, but an IPv6 prefix such as
	// ::/0 does not cover IPv4 peers.
	got, err := keyfunc.ClientIP("10.1.2.3:1", []string{"203.0.113.7"}, []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, "")
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("203.0.113.7"), got)
	got, err = keyfunc.ClientIP("10.1.2.3:1", []string{"203.0.113.7"}, []netip.Prefix{netip.MustParsePrefix("::/0")}, "")
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("10.1.2.3"), got)
}
