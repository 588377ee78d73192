package faultproxy

import (
	"strings"
	"testing"
)

// frames feeds stream to a framer in pieces of size n and returns the
// messages it finds, marking pushes with a leading "push:".
func frames(t *testing.T, stream string, n int) []string {
	t.Helper()
	var (
		f   framer
		out []string
	)
	for i := 0; i < len(stream); i += n {
		f.buf = append(f.buf, stream[i:min(i+n, len(stream))]...)
		for {
			msg, push, err := f.next()
			if err != nil {
				t.Fatalf("piece size %d: %v", n, err)
			}
			if msg == nil {
				break
			}
			s := string(msg)
			if push {
				s = "push:" + s
			}
			out = append(out, s)
			f.consume()
		}
	}
	if len(f.buf) != 0 {
		t.Fatalf("piece size %d: %q left over", n, f.buf)
	}
	return out
}

func TestFramer(t *testing.T) {
	msgs := []string{
		"+OK\r\n",
		"-NOSCRIPT No matching script.\r\n",
		":42\r\n",
		"$5\r\nhe\r\no\r\n", // a CRLF inside a bulk string
		"$-1\r\n",
		"$0\r\n\r\n",
		"*-1\r\n",
		"*0\r\n",
		"*6\r\n:0\r\n:1\r\n:2\r\n:0\r\n:60000\r\n:1700000000000\r\n", // an acquire reply
		"*2\r\n*2\r\n:1\r\n$1\r\na\r\n*1\r\n$-1\r\n",                 // nested
		"_\r\n", ",3.14\r\n", "#t\r\n", "(12345678901234567890\r\n",
		"!9\r\nERR oops!\r\n", "=7\r\ntxt:abc\r\n",
		"%2\r\n+server\r\n+redis\r\n+proto\r\n:3\r\n", // HELLO 3 style map
		"~2\r\n:1\r\n:2\r\n",
		"|1\r\n+ttl\r\n:3600\r\n$3\r\nval\r\n", // an attribute belongs to the reply after it
		"push:>3\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n$-1\r\n",
		":7\r\n",
	}
	var stream strings.Builder
	for _, m := range msgs {
		stream.WriteString(strings.TrimPrefix(m, "push:"))
	}
	for _, n := range []int{1, 2, 3, 7, 1 << 20} {
		got := frames(t, stream.String(), n)
		if strings.Join(got, "|") != strings.Join(msgs, "|") {
			t.Fatalf("piece size %d:\n got %q\nwant %q", n, got, msgs)
		}
	}
}

func TestFramerRejectsGarbage(t *testing.T) {
	for _, s := range []string{"hello\r\n", "$x\r\n", "*?\r\n", "$3\r\nabcd\r\n", "$-5\r\n"} {
		f := framer{buf: []byte(s)}
		if _, _, err := f.next(); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}
