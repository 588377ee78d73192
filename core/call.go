package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
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
	if b := c.batcherFor(l); b != nil {
		if err := b.do(ctx, cmd); err != nil {
			reuse = false
			return 0, c.failed(err)
		}
	} else if err := c.process(ctx, cmd); err != nil {
		reuse = false
		return 0, c.failed(err)
	}
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		args[0], args[1] = "eval", acquireSrc
		cmd = redis.NewCmd(ctx, args...)
		if err := c.process(ctx, cmd); err != nil {
			reuse = false
			return 0, c.failed(err)
		}
	}
	reply, err := cmd.Slice()
	if err != nil {
		return 0, deadlineError(ctx, c.failed(err))
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

// process sends cmd through guard. It is a function of its own so that the
// closure, which escapes, captures its parameter rather than a variable of
// the caller: evalAcquire's cmd then stays on the stack.
func (c *Client) process(ctx context.Context, cmd *redis.Cmd) error {
	return c.guard(ctx, func(ctx context.Context) { _ = c.rdb.Process(ctx, cmd) })
}

// guard runs a round trip, f, so that it ends at ctx's deadline even when
// the go-redis client would not stop its I/O there (without
// ContextTimeoutEnabled it waits for its own ReadTimeout, 3 s by default):
// then f runs on its own goroutine, which is left to finish after the
// deadline. guard returns ctx's error when the deadline came first.
func (c *Client) guard(ctx context.Context, f func(context.Context)) error {
	if _, ok := ctx.Deadline(); !ok || c.ctxIO {
		f(ctx)
		return nil
	}
	done := make(chan struct{})
	go func() {
		f(ctx)
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done:
			return nil
		default:
			return ctx.Err()
		}
	}
}

// honoursContext reports whether go-redis stops rdb's I/O at a context's
// deadline (its ContextTimeoutEnabled option).
func honoursContext(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// deadlineError returns err, made to wrap context.DeadlineExceeded too when
// it is a network timeout at or after ctx's deadline: go-redis with
// ContextTimeoutEnabled reports a deadline as an i/o timeout, and callers
// test for context.DeadlineExceeded whichever way the deadline was met.
func deadlineError(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}
