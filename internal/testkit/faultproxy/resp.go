package faultproxy

import (
	"bytes"
	"errors"
	"strconv"
)

// framer finds the boundaries of top-level RESP messages in a byte stream
// fed in arbitrary pieces. It checks framing only: types, lengths and
// CRLFs, never values.
type framer struct {
	buf     []byte // the bytes of the message being framed, then of the next
	off     int    // buf[:off] is framed
	pending int    // elements the current message still needs; 0 between messages
	push    bool   // the current message is a push
	broken  bool   // the stream could not be framed: forward as is
}

var crlf = []byte("\r\n")

// errFraming reports a stream that is not RESP as this framer reads it.
var errFraming = errors.New("faultproxy: not a RESP stream")

// maxBlob bounds a declared bulk length, against garbage.
const maxBlob = 512 << 20

// next returns the next complete top-level message, a view of f.buf valid
// until consume, and whether it is a push. It returns a nil message when
// the bytes so far end inside one.
func (f *framer) next() (msg []byte, push bool, err error) {
	for {
		rest := f.buf[f.off:]
		i := bytes.Index(rest, crlf)
		if i < 0 {
			return nil, false, nil
		}
		typ, line := rest[0], rest[1:i]
		adv := i + 2
		slots, consumes := 0, 1 // elements this header adds; whether it fills one
		switch typ {
		case '+', '-', ':', '_', ',', '#', '(':
			// A one-line value.
		case '$', '!', '=': // bulk string, blob error, verbatim string
			n, err := length(line)
			if err != nil {
				return nil, false, err
			}
			if n >= 0 {
				adv += n + 2
				if adv > len(rest) {
					return nil, false, nil
				}
				if !bytes.Equal(rest[adv-2:adv], crlf) {
					return nil, false, errFraming
				}
			}
		case '*', '~', '>': // array, set, push
			n, err := length(line)
			if err != nil {
				return nil, false, err
			}
			slots = max(n, 0)
		case '%', '|': // map, attribute: n pairs
			n, err := length(line)
			if err != nil {
				return nil, false, err
			}
			slots = 2 * max(n, 0)
			if typ == '|' {
				consumes = 0 // the value it describes follows
			}
		default:
			return nil, false, errFraming
		}
		if f.pending == 0 {
			f.pending, f.push = 1, typ == '>'
		}
		f.off += adv
		f.pending += slots - consumes
		if f.pending == 0 {
			return f.buf[:f.off], f.push, nil
		}
	}
}

// consume forgets the message next returned.
func (f *framer) consume() {
	n := copy(f.buf, f.buf[f.off:])
	f.buf, f.off, f.push = f.buf[:n], 0, false
}

// length parses a declared length: -1 (null) or more.
func length(line []byte) (int, error) {
	n, err := strconv.Atoi(string(line))
	if err != nil || n < -1 || n > maxBlob {
		return 0, errFraming
	}
	return n, nil
}
