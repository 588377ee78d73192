// Package escaped reads back what keyfunc.Escape wrote: the parts of
// limiter names, for the tools that list them.
package escaped

import (
	"fmt"
	"strings"
)

const upperHex = "0123456789ABCDEF"

// Unescape returns the value that keyfunc.Escape turned into p, or, for a
// value that Escape hashed (p begins with '~'), p itself, reporting false:
// a hash cannot be read back.
func Unescape(p string) (string, bool, error) {
	if strings.HasPrefix(p, "~") {
		return p, false, nil
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(p) || strings.IndexByte(upperHex, p[i+1]) < 0 || strings.IndexByte(upperHex, p[i+2]) < 0 {
			return "", false, fmt.Errorf("bad escape in %q", p)
		}
		b.WriteByte(byte(strings.IndexByte(upperHex, p[i+1])<<4 | strings.IndexByte(upperHex, p[i+2])))
		i += 2
	}
	return b.String(), true, nil
}
