package keyfunc

// The forwarding headers: X-Forwarded-For, X-Real-IP and RFC 7239
// Forwarded, read from the right, within bounds, so that hostile headers
// cost little.

import (
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
