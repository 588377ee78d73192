package keyfunc

import (
	"crypto/sha256"
	"encoding/base64"
	"unsafe"
)

// maxRawLen is the longest value that AppendEscaped escapes. Longer values
// are replaced by their hashed form.
const maxRawLen = 64

const upperHex = "0123456789ABCDEF"

// safe reports the bytes that AppendEscaped copies unchanged.
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

// AppendEscaped appends s to dst as one key part and returns the extended
// buffer. Bytes in [A-Za-z0-9._-] are copied unchanged and every other byte
// becomes %XX (uppercase hexadecimal), so the output never contains ':',
// '{', '}', '*', '~' or spaces, and different values give different parts.
//
// A value longer than 64 bytes is not escaped: AppendEscaped appends '~'
// followed by the unpadded base64url encoding of the first 16 bytes of its
// SHA-256 digest. Escaping never produces '~', so a hashed part cannot equal
// an escaped one.
//
// AppendEscaped does not allocate when dst has enough spare capacity: three
// bytes per escaped byte, or 23 bytes for a hashed value.
func AppendEscaped(dst []byte, s string) []byte {
	if len(s) > maxRawLen {
		return appendHashed(dst, stringBytes(s))
	}
	return appendEscaped(dst, s)
}

// appendEscaped escapes s (a string or a byte slice) without the length check.
func appendEscaped[S ~string | ~[]byte](dst []byte, s S) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safe[c] {
			continue
		}
		dst = append(dst, s[start:i]...)
		dst = append(dst, '%', upperHex[c>>4], upperHex[c&0xF])
		start = i + 1
	}
	return append(dst, s[start:]...)
}

// appendHashed appends '~' and the base64url form of the first 16 bytes of
// the SHA-256 digest of b.
func appendHashed(dst, b []byte) []byte {
	sum := sha256.Sum256(b)
	return appendDigest(dst, sum[:16])
}

// appendDigest appends '~' and the unpadded base64url encoding of d.
func appendDigest(dst, d []byte) []byte {
	dst = append(dst, '~')
	return base64.RawURLEncoding.AppendEncode(dst, d)
}

// stringBytes returns the bytes of s without copying them. The result must
// not be modified; it is only given to hash functions, which read it.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// appendHashed3 appends the hashed form of a+b+c, as AppendEscaped would for
// that concatenation, without allocating when it fits in 512 bytes.
func appendHashed3(dst []byte, a, b, c string) []byte {
	var buf [512]byte
	m := buf[:0]
	if n := len(a) + len(b) + len(c); n > len(buf) {
		m = make([]byte, 0, n)
	}
	m = append(append(append(m, a...), b...), c...)
	return appendHashed(dst, m)
}
