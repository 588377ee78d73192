package keyfunc

import (
	"fmt"
	"net/netip"
	"strings"
)

// Bounds on the forwarding header, so that hostile headers cost little. An
// entry beyond them cannot be parsed.
const (
	maxForwardEntries = 64      // entries examined, from the right
	maxForwardBytes   = 8 << 10 // header bytes examined, from the right
)

const defaultForwardedHeader = "X-Forwarded-For"

var (
	errBadPeer      = noKey("cannot parse the peer address")
	errBadForwarded = noKey("cannot parse the forwarding header at the client position")
	errForwardLimit = noKey("forwarding header too long or with too many entries")
)

// headerKind is the syntax of a forwarding header.
type headerKind uint8

const (
	kindList      headerKind = iota // X-Forwarded-For: comma-separated addresses
	kindForwarded                   // RFC 7239 Forwarded
	kindRealIP                      // X-Real-IP: one address
)

func kindOf(header string) headerKind {
	switch {
	case strings.EqualFold(header, "Forwarded"):
		return kindForwarded
	case strings.EqualFold(header, "X-Real-IP"):
		return kindRealIP
	}
	return kindList
}

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

// IP returns a KeyFunc that uses the client's IP address, found by ClientIP
// from the TCP peer and, when the peer is a trusted proxy, the forwarding
// header. The key is the address masked to the configured prefix length, in
// canonical form: "192.0.2.1" for IPv4 with the default /32,
// "192.0.2.0/24" with IPv4PrefixLen(24), and "2001:db8:1:2::/64" for an
// IPv6 client in 2001:db8:1:2::/64. Different prefixes always give
// different keys.
//
// When the address cannot be determined, the KeyFunc fails with an error
// wrapping ErrNoKey; it never falls back to a key shared by many clients.
func IP(opts ...IPOption) KeyFunc {
	c := &ipConfig{header: defaultForwardedHeader, v4bits: 32, v6bits: 64}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	kind := kindOf(c.header)
	return func(r Request) (string, error) {
		var (
			peer netip.Addr
			ok   bool
		)
		if pr, has := r.(PeerAddrRequest); has {
			if peer, ok = pr.PeerAddr(); ok {
				peer = peer.Unmap().WithZone("")
			}
		} else {
			peer, ok = parseNode(r.RemoteAddr(), false)
		}
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
		}
		return addrKey(addr, c.v4bits, c.v6bits), nil
	}
}

// A PeerAddrRequest is a Request that can give its peer's address without
// formatting it as a string. IP uses PeerAddr instead of RemoteAddr when a
// Request has it; an adapter whose framework keeps the peer as an address
// saves formatting and parsing it for every request this way.
type PeerAddrRequest interface {
	Request
	// PeerAddr returns the address of the TCP peer, and false if there is
	// none.
	PeerAddr() (netip.Addr, bool)
}

// ClientIP returns the address of the client of a request that arrived from
// peer ("host:port", "[v6]:port" or a bare address, as in RemoteAddr)
// carrying the values fwd (all lines, in order) of the forwarding header
// named header ("" for X-Forwarded-For), given the prefixes of trusted
// proxies. IP uses ClientIP; it is exported for callers that need the
// address itself, such as for logging.
//
// If peer is not in a trusted prefix, the client is peer and fwd is ignored:
// anyone can send a forwarding header. Otherwise the header entries are
// walked from the right, skipping trusted addresses, and the first untrusted
// address is the client; if all entries are trusted, the client is the
// leftmost one, and if there are none, the peer. Entries left of the client
// were written by the client or untrusted proxies and are never parsed. An
// entry at the client position that cannot be parsed, or that lies beyond
// the 64 rightmost entries or the 8 KiB rightmost header bytes, gives an
// error wrapping ErrNoKey, as does an unparseable peer. For X-Real-IP, the
// last line of a trusted peer's header is the client address, whatever it
// is.
//
// IPv4-mapped IPv6 addresses are returned as IPv4, and zones are removed.
func ClientIP(peer string, fwd []string, trusted []netip.Prefix, header string) (netip.Addr, error) {
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
// address itself for IPv4 with /32.
func addrKey(a netip.Addr, v4bits, v6bits int) string {
	bits := v6bits
	if a.Is4() {
		if v4bits == 32 {
			return a.String()
		}
		bits = v4bits
	}
	p, _ := a.Prefix(bits)
	var buf [64]byte // the longest prefix, "xxxx:...:xxxx/128", is 43 bytes
	return string(p.AppendTo(buf[:0]))
}

// forwardedClient applies the trusted-proxy rule to the header lines of a
// request whose peer is trusted.
func forwardedClient(peer netip.Addr, lines []string, trusted []netip.Prefix, kind headerKind) (netip.Addr, error) {
	if kind == kindRealIP {
		return realIP(peer, lines)
	}
	w := walker{lines: lines, line: len(lines), budget: maxForwardBytes, quotes: kind == kindForwarded}
	var last netip.Addr
	for n := 0; ; n++ {
		entry, st := w.next()
		if st == walkDone {
			break
		}
		if st == walkBeyond || n >= maxForwardEntries {
			return netip.Addr{}, errForwardLimit
		}
		var a netip.Addr
		var ok bool
		if kind == kindForwarded {
			a, ok = parseForwardedElement(entry)
		} else {
			a, ok = parseNode(entry, false)
		}
		if !ok {
			return netip.Addr{}, errBadForwarded
		}
		if !isTrusted(trusted, a) {
			return a, nil
		}
		last = a
	}
	if !last.IsValid() {
		return peer, nil
	}
	return last, nil
}

// realIP reads X-Real-IP: the last line, a single address. An empty value
// means no header, so the client is the peer.
func realIP(peer netip.Addr, lines []string) (netip.Addr, error) {
	if len(lines) == 0 {
		return peer, nil
	}
	v := lines[len(lines)-1]
	if len(v) > maxForwardBytes {
		return netip.Addr{}, errForwardLimit
	}
	v = trimOWS(v)
	if v == "" {
		return peer, nil
	}
	a, ok := parseNode(v, false)
	if !ok {
		return netip.Addr{}, errBadForwarded
	}
	return a, nil
}

type walkStatus uint8

const (
	walkEntry  walkStatus = iota // an entry was returned
	walkDone                     // no entries left
	walkBeyond                   // the next entry is beyond maxForwardBytes
)

// walker yields the non-empty entries of comma-separated header lines from
// right to left, looking at no more than budget bytes. With quotes, commas
// inside quoted strings do not separate entries.
type walker struct {
	lines     []string
	line      int    // lines[line:] are consumed
	win       string // the unconsumed part of the current line
	inLine    bool   // win holds a pending leftmost entry, possibly empty
	truncated bool   // win does not start at the beginning of its line
	budget    int
	quotes    bool
}

func (w *walker) next() (string, walkStatus) {
	for {
		if !w.inLine {
			if w.truncated {
				return "", walkBeyond
			}
			if w.line == 0 {
				return "", walkDone
			}
			w.line--
			l := w.lines[w.line]
			if len(l) > w.budget {
				l = l[len(l)-w.budget:]
				w.truncated = true
			}
			w.budget -= len(l)
			w.win, w.inLine = l, true
		}
		var entry string
		if i := lastSeparator(w.win, w.quotes); i >= 0 {
			entry, w.win = w.win[i+1:], w.win[:i]
		} else {
			w.inLine = false
			if w.truncated {
				return "", walkBeyond
			}
			entry = w.win
		}
		// Empty list elements are allowed and ignored (RFC 9110, 5.6.1).
		if entry = trimOWS(entry); entry != "" {
			return entry, walkEntry
		}
	}
}

// lastSeparator returns the index of the last comma in s, outside quoted
// strings when quotes is set, or -1.
func lastSeparator(s string, quotes bool) int {
	if !quotes {
		return strings.LastIndexByte(s, ',')
	}
	in := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			if in {
				// An odd run of backslashes before it escapes the quote.
				k := i
				for k > 0 && s[k-1] == '\\' {
					k--
				}
				if (i-k)%2 == 1 {
					i = k
					continue
				}
			}
			in = !in
		case ',':
			if !in {
				return i
			}
		}
	}
	return -1
}

// parseForwardedElement returns the address in the for= parameter of one
// RFC 7239 element, such as `for="[2001:db8::17]:4711";proto=https`.
// Elements without exactly one usable for= parameter are invalid.
func parseForwardedElement(e string) (netip.Addr, bool) {
	var node string
	seen := false
	for {
		e = trimOWS(e)
		i := 0
		for i < len(e) && isTchar(e[i]) {
			i++
		}
		if i == 0 || i >= len(e) || e[i] != '=' {
			return netip.Addr{}, false
		}
		name := e[:i]
		e = e[i+1:]
		var val string
		escaped := false
		if e != "" && e[0] == '"' {
			j := 1
			for ; j < len(e) && e[j] != '"'; j++ {
				switch c := e[j]; {
				case c == '\\':
					escaped = true
					j++
				case c < ' ' && c != '\t' || c == 0x7f:
					return netip.Addr{}, false
				}
			}
			if j >= len(e) {
				return netip.Addr{}, false
			}
			val, e = e[1:j], e[j+1:]
		} else {
			// A token; '[', ']' and ':' are accepted too, for proxies that
			// forget to quote IPv6 addresses.
			j := 0
			for j < len(e) && (isTchar(e[j]) || e[j] == '[' || e[j] == ']' || e[j] == ':') {
				j++
			}
			if j == 0 {
				return netip.Addr{}, false
			}
			val, e = e[:j], e[j:]
		}
		if strings.EqualFold(name, "for") {
			if seen || escaped {
				return netip.Addr{}, false
			}
			seen, node = true, val
		}
		e = trimOWS(e)
		if e == "" {
			break
		}
		if e[0] != ';' {
			return netip.Addr{}, false
		}
		if e = trimOWS(e[1:]); e == "" {
			break
		}
	}
	if !seen {
		return netip.Addr{}, false
	}
	// "unknown" and obfuscated identifiers ("_hidden") are not addresses,
	// so parseNode rejects them.
	return parseNode(node, true)
}

// parseNode parses an address with an optional port: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:80".
// With obfPort, the port may also be an RFC 7239 obfuscated port ("_p1").
// The result has no zone and IPv4-mapped addresses are unmapped.
func parseNode(s string, obfPort bool) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	var host string
	want6 := false
	if s[0] == '[' {
		i := strings.IndexByte(s, ']')
		if i < 0 {
			return netip.Addr{}, false
		}
		host, want6 = s[1:i], true
		if rest := s[i+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], obfPort)) {
			return netip.Addr{}, false
		}
	} else {
		switch strings.Count(s, ":") {
		case 0:
			host = s
		case 1:
			i := strings.IndexByte(s, ':')
			if !validPort(s[i+1:], obfPort) {
				return netip.Addr{}, false
			}
			host = s[:i]
		default:
			host, want6 = s, true
		}
	}
	// Rule out the common non-addresses before ParseAddr, whose errors
	// allocate.
	if host == "" || !isAddrChar(host[0]) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Is6() != want6 {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

func isAddrChar(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == ':'
}

// validPort reports whether p is a decimal port number, or with obf also an
// obfuscated port.
func validPort(p string, obf bool) bool {
	if obf && len(p) > 1 && p[0] == '_' {
		for i := 1; i < len(p); i++ {
			if c := p[i]; !safe[c] {
				return false
			}
		}
		return true
	}
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

// isTchar reports whether c may appear in an HTTP token.
func isTchar(c byte) bool {
	return safe[c] || strings.IndexByte("!#$%&'*+^`|~", c) >= 0
}

// trimOWS removes spaces and tabs around s.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
