package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// A call is one script call on a limiter's keys, waiting for its reply.
// Every script call of a Limiter is one, and every call goes through
// Client.do: the call timeout, the deadline guard, coalescing, the NOSCRIPT
// fallback and the Cluster slot-map reload are applied there, once. Acquires
// on one limiter that are sent together share a single script call.
type call struct {
	l       *Limiter
	s       *script
	args    []any   // the script's arguments after the keys, but for an acquire
	permits int64   // an acquire's permits
	member  string  // an acquire's log member
	reply   []int64 // the script's reply, but for an acquire
	res     Result  // an acquire's result
	err     error
}

// finish gives the calls of one script call, cl first, its reply v or
// its error.
func (cl *call) finish(calls []*call, v []int64, err error) {
	if err == nil && cl.s == scriptAcquire {
		err = cl.l.acquireReply(v, calls)
	}
	for _, c := range calls {
		if c.err == nil {
			c.reply, c.err = v, err
		}
	}
}

// maxShared bounds the acquires that share one script call.
const maxShared = 128

// do makes cl's round trip, alone or with other calls in one pipeline, and
// fills in its reply or error. It returns ctx's error, leaving cl alone, when
// the deadline comes first.
func (c *Client) do(ctx context.Context, cl *call) error {
	ctx, cancel := cl.l.callContext(ctx)
	defer cancel()
	return c.failed(c.batcherFor(cl.l).do(ctx, cl))
}

// send makes one round trip for calls and gives each its reply or error:
// acquires on the same limiter share a script call, several script calls go
// as one pipeline, and a script the server does not have is sent again whole.
func (c *Client) send(ctx context.Context, calls []*call) {
	if len(calls) == 1 {
		cl := calls[0]
		cmd := cl.command(ctx, nil, false)
		_ = c.rdb.Process(ctx, cmd)
		if isNoScript(cmd.Err()) {
			cmd = cl.command(ctx, nil, true)
			_ = c.rdb.Process(ctx, cmd)
		}
		cl.finish(calls, cmd.Val(), c.failed(deadlineError(ctx, cmd.Err())))
		return
	}
	groups := shareCalls(calls)
	cmds := make([]*redis.IntSliceCmd, len(groups))
	for i, g := range groups {
		cmds[i] = g[0].command(ctx, g[1:], false)
	}
	c.pipeline(ctx, cmds)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		resend := make([]*redis.IntSliceCmd, len(again))
		for j, i := range again {
			cmds[i] = groups[i][0].command(ctx, groups[i][1:], true)
			resend[j] = cmds[i]
		}
		c.pipeline(ctx, resend)
	}
	var failed error
	for i, g := range groups {
		err := deadlineError(ctx, cmds[i].Err())
		if err != nil && failed == nil {
			failed = err
		}
		g[0].finish(g, cmds[i].Val(), err)
	}
	_ = c.failed(failed)
}

func (c *Client) pipeline(ctx context.Context, cmds []*redis.IntSliceCmd) {
	if len(cmds) == 1 {
		_ = c.rdb.Process(ctx, cmds[0])
		return
	}
	pipe := c.rdb.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_, _ = pipe.Exec(ctx)
}

// shareCalls groups calls into script calls: the acquires on one limiter
// (up to maxShared) share one, in their order; every other call is its own.
func shareCalls(calls []*call) [][]*call {
	groups := make([][]*call, 0, len(calls))
	open := make(map[string]int) // limiter name -> its group still open
	for _, cl := range calls {
		if cl.s == scriptAcquire {
			if i, ok := open[cl.l.name]; ok && len(groups[i]) < maxShared && sameRate(groups[i][0].l, cl.l) {
				groups[i] = append(groups[i], cl)
				continue
			}
			open[cl.l.name] = len(groups)
		}
		groups = append(groups, []*call{cl})
	}
	return groups
}

// sameRate reports whether two limiters of one name decide with the same
// rate: the same rate given in code, or both the stored one.
func sameRate(a, b *Limiter) bool {
	switch {
	case a.coded == b.coded:
		return true
	case a.coded == nil || b.coded == nil:
		return false
	}
	return a.coded.args == b.coded.args
}

// noArg stands for an absent argument: a script reads four of them as "no
// rate given in code".
var noArg = ""

// command builds the script call of cl and, for an acquire, of the acquires
// in more, which share it: EVALSHA, or EVAL with the whole script. Its
// arguments point into the calls and the limiter, which outlive it.
func (cl *call) command(ctx context.Context, more []*call, eval bool) *redis.IntSliceCmd {
	l := cl.l
	n := 3 + len(l.keys) + len(cl.args)
	if cl.s == scriptAcquire {
		n += 4 + 2*(1+len(more))
	}
	args := make([]any, 0, n)
	if eval {
		args = append(args, "eval", cl.s.src)
	} else {
		args = append(args, "evalsha", cl.s.sha)
	}
	args = append(args, len(l.keys))
	for i := range l.keys {
		args = append(args, &l.keys[i])
	}
	if cl.s == scriptAcquire {
		args = l.appendRateArgs(args)
		args = append(args, &cl.permits, &cl.member)
		for _, m := range more {
			args = append(args, &m.permits, &m.member)
		}
	}
	args = append(args, cl.args...)
	return redis.NewIntSliceCmd(ctx, args...)
}

// appendRateArgs appends the rate given in code, or four empty arguments.
func (l *Limiter) appendRateArgs(args []any) []any {
	if cr := l.coded; cr != nil {
		return append(args, &cr.args[0], &cr.args[1], &cr.args[2], &cr.args[3])
	}
	return append(args, &noArg, &noArg, &noArg, &noArg)
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
