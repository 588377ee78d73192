package keyfunc

import (
	"fmt"
	"net/netip"
	"strings"
)

var errBadPeer = noKey("cannot parse the peer address")

type ipConfig struct {
	trusted []netip.Prefix
	header  string
	v4bits  int
	v6bits  int
}

// An IPOption configures IP.
type IPOption func(*ipConfig)

// TrustProxies returns an option that trusts the proxies whose addresses are
// in prefixes to report the client address in the forwarding header (see
// ForwardedHeader). Without it, IP ignores forwarding headers and uses the
// TCP peer. List only proxies you run: every address in prefixes can set any
// client address it likes. Invalid prefixes are ignored; IPv4-mapped IPv6
// prefixes such as ::ffff:10.0.0.0/104 are treated as the IPv4 prefix they
// map. ParsePrefixes builds prefixes from configuration strings. The option
// may be given several times; the prefixes add up.
func TrustProxies(prefixes ...netip.Prefix) IPOption {
	ps := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		if p.IsValid() {
			ps = append(ps, normalizePrefix(p))
		}
	}
	return func(c *ipConfig) { c.trusted = append(c.trusted, ps...) }
}

// ForwardedHeader returns an option that sets the header in which trusted
// proxies report the client address. The default is "X-Forwarded-For".
// "Forwarded" is parsed as RFC 7239 (the for= parameter of each element),
// "X-Real-IP" as a single address set by the nearest trusted proxy (the last
// line wins), and any other name, such as "CF-Connecting-IP", like
// X-Forwarded-For. Names are matched without regard to case. An empty name
// selects the default.
func ForwardedHeader(name string) IPOption {
	return func(c *ipConfig) {
		if name == "" {
			name = defaultForwardedHeader
		}
		c.header = name
	}
}

// IPv4PrefixLen returns an option that groups IPv4 clients by their first
// bits bits, so that IPv4PrefixLen(24) gives one key per /24 network. The
// default is 32, one key per address. bits is clamped to [0, 32].
func IPv4PrefixLen(bits int) IPOption {
	bits = min(max(bits, 0), 32)
	return func(c *ipConfig) { c.v4bits = bits }
}

// IPv6PrefixLen returns an option that groups IPv6 clients by their first
// bits bits. The default is 64: a single host usually controls a whole /64,
// so a smaller unit would let it use billions of keys. bits is clamped to
// [0, 128].
func IPv6PrefixLen(bits int) IPOption {
	bits = min(max(bits, 0), 128)
	return func(c *ipConfig) { c.v6bits = bits }
}

// IP returns a KeyFunc that uses the client's IP address: the TCP peer
// (Request.RemoteAddr), or, when the peer is a trusted proxy
// (TrustProxies), the client that the forwarding header names
// (ForwardedHeader). The key is the address masked to the configured
// prefix length, in canonical form: "192.0.2.1" for IPv4 with the default
// /32, "192.0.2.0/24" with IPv4PrefixLen(24), and "2001:db8:1:2::/64" for
// an IPv6 client in 2001:db8:1:2::/64. Different prefixes always give
// different keys.
//
// The header's entries are walked from the right, skipping trusted
// addresses, and the first untrusted address is the client; if all entries
// are trusted, the client is the leftmost one, and if there are none, the
// peer. Entries left of the client were written by the client or untrusted
// proxies and are never parsed. An untrusted peer's header is ignored:
// anyone can send one. For X-Real-IP, the last line of a trusted peer's
// header is the client address, whatever it is. IPv4-mapped IPv6 addresses
// count as IPv4, and zones are removed.
//
// When the address cannot be determined (an unparseable peer, or an entry
// at the client position that cannot be parsed or lies beyond the 64
// rightmost entries or the 8 KiB rightmost header bytes), the KeyFunc
// fails with an error wrapping ErrNoKey; it never falls back to a key
// shared by many clients.
func IP(opts ...IPOption) KeyFunc {
	c := &ipConfig{header: defaultForwardedHeader, v4bits: 32, v6bits: 64}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	kind := kindOf(c.header)
	return func(r Request) (string, error) {
		peer, src, ok := peerOf(r)
		if !ok {
			return "", errBadPeer
		}
		addr := peer
		if isTrusted(c.trusted, peer) {
			var err error
			addr, err = forwardedClient(peer, r.HeaderValues(c.header), c.trusted, kind)
			if err != nil {
				return "", err
			}
			src = ""
		}
		return addrKey(addr, c.v4bits, c.v6bits, src), nil
	}
}

// peerOf returns the address of r's TCP peer, and the text it was read
// from (RemoteAddr), if any. A Request whose framework holds the peer
// parsed (fasthttp) may give it as a netip.AddrPort, with no string made
// and parsed again; an invalid one falls back to RemoteAddr.
func peerOf(r Request) (netip.Addr, string, bool) {
	if p, ok := r.(interface{ RemoteAddrPort() netip.AddrPort }); ok {
		if a := p.RemoteAddrPort().Addr(); a.IsValid() {
			return a.WithZone("").Unmap(), "", true
		}
	}
	src := r.RemoteAddr()
	a, ok := parseNode(src, false)
	return a, src, ok
}

// clientIP returns the address of the client of a request that arrived
// from peer ("host:port", "[v6]:port" or a bare address, as in RemoteAddr)
// carrying the values fwd (all lines, in order) of the forwarding header
// named header ("" for X-Forwarded-For), given the prefixes of trusted
// proxies, as IP finds it.
func clientIP(peer string, fwd []string, trusted []netip.Prefix, header string) (netip.Addr, error) {
	p, ok := parseNode(peer, false)
	if !ok {
		return netip.Addr{}, errBadPeer
	}
	if !isTrusted(trusted, p) {
		return p, nil
	}
	if header == "" {
		header = defaultForwardedHeader
	}
	return forwardedClient(p, fwd, trusted, kindOf(header))
}

// ParsePrefixes parses proxy addresses from configuration strings for use
// with TrustProxies. Each string is a CIDR prefix such as "10.0.0.0/8" or
// "2001:db8::/32", or a bare address, taken as a /32 or /128 prefix. Host
// bits are cleared and IPv4-mapped IPv6 forms become IPv4. Surrounding
// spaces are ignored.
func ParsePrefixes(cidrs ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			if p, err = netip.ParsePrefix(s); err != nil {
				return nil, fmt.Errorf("keyfunc: invalid proxy prefix %q: %w", s, err)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("keyfunc: invalid proxy address %q: %w", s, err)
			}
			a = a.WithZone("")
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, normalizePrefix(p))
	}
	return out, nil
}

// normalizePrefix clears host bits and turns an IPv4-mapped prefix into IPv4.
func normalizePrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// isTrusted reports whether a is in one of the trusted prefixes. An IPv4
// address also matches an IPv4-mapped IPv6 prefix, as normalizePrefix would
// have turned it into IPv4.
func isTrusted(trusted []netip.Prefix, a netip.Addr) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
		if a.Is4() && p.Bits() >= 96 && p.Addr().Is4In6() && p.Contains(netip.AddrFrom16(a.As16())) {
			return true
		}
	}
	return false
}

// addrKey returns the key of a: its prefix of the configured length, or the
// address itself for IPv4 with /32. When src, the text a was read from
// ("host:port", "[host]:port" or a bare host), starts with the key as it
// is, the key is that part of src, and no string is made.
func addrKey(a netip.Addr, v4bits, v6bits int, src string) string {
	var buf [64]byte // the longest prefix, "xxxx:...:xxxx/128", is 43 bytes
	var key []byte
	if bits := v6bits; a.Is4() && v4bits == 32 {
		key = a.AppendTo(buf[:0])
	} else {
		if a.Is4() {
			bits = v4bits
		}
		p, _ := a.Prefix(bits)
		key = p.AppendTo(buf[:0])
	}
	if len(src) > 0 && src[0] == '[' {
		src = src[1:]
	}
	if n := len(key); len(src) >= n && src[:n] == string(key) && (len(src) == n || src[n] == ':' || src[n] == ']') {
		return src[:n]
	}
	return string(key)
}
