package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// The acquire script is called without go-redis's Script helper, so that a
// decision allocates as little as possible: its arguments are pointers
// into the Limiter and into a pooled frame, which go-redis writes without
// boxing.
var (
	acquireSHA = any(scriptAcquire.Hash())
	acquireSrc = any(luaLib + luaAcquire)
)

// frame holds the arguments of one acquire call. member aliases raw: the
// frame is reused only after go-redis is done with the call.
type frame struct {
	args    [13]any
	permits int64
	raw     [21]byte
	member  string
}

var frames = sync.Pool{New: func() any { return new(frame) }}

// evalAcquire runs the acquire script for l and reads its reply into v,
// returning how many values it held: EVALSHA, and EVAL only when the
// server's script cache lacks the script.
func (c *Client) evalAcquire(ctx context.Context, l *Limiter, permits int64, v *[10]int64) (int, error) {
	f := frames.Get().(*frame)
	reuse := true // false when a pipeline may still read f after we return
	defer func() {
		if reuse {
			clear(f.args[:])
			f.member = ""
			frames.Put(f)
		}
	}()
	putMember(&f.raw, permits)
	f.permits, f.member = permits, unsafe.String(&f.raw[0], len(f.raw))
	args := append(f.args[:0], "evalsha", acquireSHA, 5)
	for i := range l.keys {
		args = append(args, &l.keys[i])
	}
	args = append(args, &f.permits, &f.member)
	if cr := l.coded; cr != nil {
		for i := range cr.args {
			args = append(args, &cr.args[i])
		}
	}
	cmd := redis.NewCmd(ctx, args...)
	if c.batch != nil {
		if err := c.batch.do(ctx, cmd); err != nil {
			reuse = false
			return 0, err
		}
	} else {
		_ = c.rdb.Process(ctx, cmd)
	}
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		args[0], args[1] = "eval", acquireSrc
		cmd = redis.NewCmd(ctx, args...)
		_ = c.rdb.Process(ctx, cmd)
	}
	reply, err := cmd.Slice()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, x := range reply {
		i, ok := x.(int64)
		if !ok || n == len(v) {
			return 0, fmt.Errorf("unexpected reply %v", reply)
		}
		v[n] = i
		n++
	}
	return n, nil
}
