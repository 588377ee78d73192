package keyfunc

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// maxRawLen is the longest value that Escape escapes. Longer values are
// replaced by their hashed form.
const maxRawLen = 64

const upperHex = "0123456789ABCDEF"

// safe reports the bytes that Escape keeps unchanged.
var safe = func() (t [256]bool) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['.'], t['_'], t['-'] = true, true, true
	return t
}()

// Escape returns s in the alphabet of limiter names: the bytes A-Z, a-z,
// 0-9, '.', '_' and '-' are kept and every other byte becomes %XX
// (uppercase hexadecimal), so the result never contains ':', '{', '}',
// '*', '~' or spaces, and different values give different results. A
// value that needs no escaping is returned as it is.
//
// A value longer than 64 bytes is not escaped: Escape returns '~' and the
// unpadded base64url encoding of the first 16 bytes of its SHA-256 digest.
// Escaping never produces '~', so a hashed value cannot equal an escaped
// one.
//
// Package policy escapes every key this way before it goes into a limiter
// name, so a key function can return any string.
func Escape(s string) string {
	if len(s) > maxRawLen {
		sum := sha256.Sum256([]byte(s))
		return "~" + base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !safe[s[i]] {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safe[c] {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0xF])
	}
	return b.String()
}
