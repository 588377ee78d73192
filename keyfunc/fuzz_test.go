package keyfunc_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/keyfunc"
)

// FuzzEscape checks that every value gives a well-formed result that
// decodes back to the value (so escaping is injective), or the hashed form
// for long values.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a", "a:b", "{x}", "*", "%", "%25", "~", "é", "\x00", strings.Repeat("x", 64), strings.Repeat("x", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		part := keyfunc.Escape(s)
		if s == "" {
			if part != "" {
				t.Fatalf("empty value gave %q", part)
			}
			return
		}
		if err := checkPart(part); err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(part, ":{}* ") {
			t.Fatalf("%q gave %q", s, part)
		}
		if len(s) > 64 {
			if part != hashed(s) {
				t.Fatalf("%q gave %q, want %q", s, part, hashed(s))
			}
			return
		}
		back, err := unescape(part)
		if err != nil {
			t.Fatal(err)
		}
		if back != s {
			t.Fatalf("%q gave %q, which decodes to %q", s, part, back)
		}
	})
}

// FuzzClientIP feeds arbitrary peers and headers to ClientIP and IP.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.2:1", "198.51.100.9, 203.0.113.7", "10.0.0.1", uint8(0))
	f.Add("192.0.2.1:1", "203.0.113.7", "", uint8(0))
	f.Add("[2001:db8:ffff::1]:80", `for="[2001:db8::1]:80";proto=https`, "for=10.0.0.1", uint8(1))
	f.Add("10.0.0.2", "203.0.113.7", "198.51.100.1", uint8(2))
	f.Add("[::ffff:10.0.0.2]:1", "::ffff:203.0.113.7, fe80::1%eth0", "[::1]:80", uint8(0))
	f.Add("10.0.0.2:1", `for="x, for=203.0.113.7;ext="a\",b"`, `For=_h;by=unknown`, uint8(1))
	headers := []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"}
	f.Fuzz(func(t *testing.T, peer, line1, line2 string, h uint8) {
		header := headers[int(h)%len(headers)]
		lines := []string{line1, line2}

		got, err := keyfunc.ClientIP(peer, lines, trusted, header)
		untrusted, perr := keyfunc.ClientIP(peer, lines, nil, header)
		if perr != nil {
			// Only the peer can fail without trusted proxies.
			if err == nil {
				t.Fatalf("peer %q: error %v without trust, none with", peer, perr)
			}
			return
		}
		if untrusted.Zone() != "" || untrusted.Is4In6() {
			t.Fatalf("peer %q gave %v", peer, untrusted)
		}
		peerTrusted := false
		for _, p := range trusted {
			peerTrusted = peerTrusted || p.Contains(untrusted)
		}
		if !peerTrusted {
			if err != nil || got != untrusted {
				t.Fatalf("untrusted peer %q: got %v, %v; want %v", peer, got, err, untrusted)
			}
		}
		if err == nil && (!got.IsValid() || got.Zone() != "" || got.Is4In6()) {
			t.Fatalf("got %v", got)
		}

		// IP agrees with ClientIP.
		r := newReq(peer)
		for _, l := range lines {
			r.headers.Add(header, l)
		}
		k, kerr := keyfunc.IP(keyfunc.TrustProxies(trusted...), keyfunc.ForwardedHeader(header))(r)
		if (kerr == nil) != (err == nil) {
			t.Fatalf("IP error %v, ClientIP error %v", kerr, err)
		}
		if err == nil {
			if want := netip.PrefixFrom(got, 64).Masked().String(); got.Is6() && k != want {
				t.Fatalf("IP gave %q, want %q", k, want)
			}
			if got.Is4() && k != got.String() {
				t.Fatalf("IP gave %q, want %q", k, got)
			}
		}
	})
}

// FuzzForwarded checks that whatever a client puts in a forwarding header,
// the entry appended by a trusted proxy decides the client address: either
// on the same line, after a comma, or on a line of its own.
func FuzzForwarded(f *testing.F) {
	for _, s := range []string{"", "for=1.2.3.4", `for="`, `"`, `\"`, `for="[::1]:80"`, ",,,", `x="a,b`, strings.Repeat("a", 9000)} {
		f.Add(s)
	}
	want := netip.MustParseAddr("203.0.113.7")
	f.Fuzz(func(t *testing.T, attacker string) {
		for _, tc := range []struct {
			header string
			lines  []string
		}{
			{"X-Forwarded-For", []string{attacker + ", 203.0.113.7"}},
			{"X-Forwarded-For", []string{attacker, "203.0.113.7"}},
			{"X-Forwarded-For", []string{attacker + ", 203.0.113.7", "10.0.0.1"}},
			{"Forwarded", []string{attacker + ", for=203.0.113.7"}},
			{"Forwarded", []string{attacker, `for=203.0.113.7;proto=https`}},
			{"Forwarded", []string{attacker + `, for="203.0.113.7:443"`, "for=10.0.0.1"}},
			{"X-Real-IP", []string{attacker, "203.0.113.7"}},
		} {
			got, err := keyfunc.ClientIP("10.0.0.2:1", tc.lines, trusted, tc.header)
			if err != nil || got != want {
				t.Fatalf("%s %q: got %v, %v", tc.header, tc.lines, got, err)
			}
		}
		// The attacker's text at the client position may fail to parse,
		// but must not panic; if it parses, the client is not the peer.
		for _, header := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
			got2, err2 := keyfunc.ClientIP("10.0.0.2:1", []string{attacker}, trusted, header)
			got3, err3 := keyfunc.ClientIP("10.0.0.3:1", []string{attacker}, trusted, header)
			if err2 == nil && err3 == nil && got2 == netip.MustParseAddr("10.0.0.2") && got3 == netip.MustParseAddr("10.0.0.3") &&
				strings.Trim(attacker, " \t,") != "" {
				t.Fatalf("%s %q: fell back to the peer", header, attacker)
			}
		}
	})
}
