package core

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// The script calls of a round trip: a call goes through Client.do to the
// batcher of its limiter (batch.go), which sends it alone or with the
// calls queued meanwhile as one pipeline (send); in it the acquires on one
// limiter share a script call (plan, command), and what a limiter owes
// (owed.go) goes first. Whether Redis is failing is judged in health.go.

// A call is one script call on a limiter's keys, waiting for its reply.
// Every script call of a Limiter is one, and every call goes through
// Client.do: the call timeout, the deadline guard, coalescing, the NOSCRIPT
// fallback and the Cluster slot-map reload are applied there, once.
// Acquires sent together share script calls (see plan).
type call struct {
	ctx     context.Context // its caller's; nil for a payment (see WithRoundTripHook)
	l       *Limiter
	s       *script
	args    []any   // the script's arguments after the keys, but for an acquire
	permits int64   // an acquire's permits
	member  member  // an acquire's log member
	reply   []int64 // the script's reply, but for an acquire
	res     Result  // an acquire's result
	err     error
	debts   []*op // a payment of what the limiter owes: its ops
	// sendBy is the deadline of the round trip that took cl (unix ms; 0:
	// none, or its caller's own): its script runs before it or not at all.
	// Set under its batcher's lock when the round trip takes it.
	sendBy int64
	alone  [1]*call   // cl, for a round trip of its own (see only)
	own    scriptCall // cl's script call, in a round trip of its own
}

// only returns the calls of a round trip that takes cl alone.
func (cl *call) only() []*call {
	cl.alone[0] = cl
	return cl.alone[:]
}

// keys returns the keys, of its limiter's five, that cl's script takes:
// those its limiter declares (see declared), but for the scripts that set
// a rate or act on every key (SetRate, Expire, Delete...), which take all
// five on a rate's limiter. A quota's limiter (its counter) and a
// semaphore's (its counter and leases) have the same keys for every
// script.
func (cl *call) keys() []uint8 {
	if cl.s.declared || cl.l.fixed {
		return cl.l.decl
	}
	return allKeys
}

// maxShared bounds the acquires that share one script call.
const maxShared = 128

// do makes cl's round trip, alone or with other calls in one pipeline, and
// fills in its reply or error. It returns ctx's error, leaving cl alone, when
// the deadline comes first, and reports whether cl was sent to Redis.
func (c *Client) do(ctx context.Context, cl *call) (sent bool, err error) {
	ctx, cancel := cl.l.callContext(ctx)
	defer cancel()
	sent, err = c.batcherFor(cl.l).do(ctx, cl)
	return sent, c.failed(err)
}

// A scriptCall is one EVALSHA: either one call, or the acquires of one or
// more limiters, a group per limiter.
type scriptCall struct {
	groups [][]*call
	cmd    *redis.IntSliceCmd
	first  redis.IntSliceCmd // backs cmd when it is first built
	one    [1][]*call        // groups, of a script call of one group
	argv   [16]any           // backs the command's arguments when they fit
}

// send makes one round trip for calls (see trip), inside the Client's
// round trip hook, if it has one.
func (c *Client) send(ctx context.Context, calls []*call) error {
	if c.hook == nil {
		return c.trip(ctx, calls)
	}
	ctx, end := c.hook(ctx, callers(calls))
	err := c.trip(ctx, calls)
	end(unavailable(err))
	return err
}

// callers returns the contexts of the callers of calls, in their order.
func callers(calls []*call) []context.Context {
	ctxs := make([]context.Context, 0, len(calls))
	for _, cl := range calls {
		if cl.ctx != nil {
			ctxs = append(ctxs, cl.ctx)
		}
	}
	return ctxs
}

// trip makes one round trip for calls and gives each its reply or error.
// What their limiters owe goes first, in the same round trip. The script
// calls go as one pipeline, and a script the server does not have is sent
// again whole. It returns the round trip's failure, if it failed as a
// whole: a network error or timeout, or a refusal of Redis's own (see
// refusal), as go-redis reported it (the calls' errors wrap it in
// ErrUnavailable, but for a timeout, and so does the Outage it may start,
// once); a script's error reply is no failure of the round trip.
func (c *Client) trip(ctx context.Context, calls []*call) error {
	pays := c.owed.payments(calls)
	if len(calls) == 1 && len(pays) == 0 {
		sc := &calls[0].own
		sc.one[0] = calls
		sc.groups = sc.one[:]
		sc.cmd = sc.command(ctx, false)
		_ = c.rdb.Process(ctx, sc.cmd)
		if isNoScript(sc.cmd.Err()) {
			sc.cmd = sc.command(ctx, true)
			_ = c.rdb.Process(ctx, sc.cmd)
		}
		c.tryAgain(ctx, []*scriptCall{sc})
		err := c.failed(deadlineError(ctx, sc.cmd.Err()))
		sc.finish(unavailable(err))
		if calls[0].debts != nil {
			c.owed.paid(calls) // the Client's writer's
		}
		return roundTripFailure(err)
	}
	scs := make([]*scriptCall, 0, len(pays)+len(calls))
	for _, p := range pays {
		scs = append(scs, &scriptCall{groups: [][]*call{{p}}})
	}
	scs = append(scs, c.plan(calls)...)
	cmds := make([]redis.Cmder, len(scs))
	for i, sc := range scs {
		// A payment goes whole (EVAL), not by its SHA: a server without the
		// script would run the calls after it first, and they must count
		// what the limiter owes.
		sc.cmd = sc.command(ctx, i < len(pays))
		cmds[i] = sc.cmd
	}
	c.pipeline(ctx, cmds)
	var again []redis.Cmder
	for _, sc := range scs {
		if isNoScript(sc.cmd.Err()) {
			sc.cmd = sc.command(ctx, true)
			again = append(again, sc.cmd)
		}
	}
	if len(again) > 0 {
		c.pipeline(ctx, again)
	}
	c.tryAgain(ctx, scs)
	var failed error
	for _, sc := range scs {
		err := deadlineError(ctx, sc.cmd.Err())
		if failed == nil {
			failed = roundTripFailure(err)
		}
		sc.finish(unavailable(err))
	}
	c.owed.paid(pays)
	c.owed.paid(calls) // those of the Client's writer
	return c.failed(failed)
}

// tryAgain sends again, whole, the script calls of scs that a Redis
// Cluster answered TRYAGAIN (their slot moves, and their keys are not all
// on one node yet), after tryAgainPause, then twice as long each time,
// until they get another answer or ctx ends. go-redis has followed the
// MOVED and ASK redirections, and retried TRYAGAIN a few times, already.
func (c *Client) tryAgain(ctx context.Context, scs []*scriptCall) {
	for pause := tryAgainPause; ; pause *= 2 {
		var again []redis.Cmder
		for _, sc := range scs {
			if isTryAgain(sc.cmd.Err()) {
				sc.cmd = sc.command(ctx, true)
				again = append(again, sc.cmd)
			}
		}
		if len(again) == 0 || sleep(ctx, pause) != nil {
			return
		}
		c.pipeline(ctx, again)
	}
}

// tryAgainPause is the first pause before a script call answered TRYAGAIN
// goes again: a slot's keys move in a few milliseconds.
const tryAgainPause = 5 * time.Millisecond

func (c *Client) pipeline(ctx context.Context, cmds []redis.Cmder) {
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

// plan turns calls into script calls. The acquires on one limiter (with the
// same rate) share a group, in their order; the groups of acquires share a
// script call, up to maxShared acquires, when the Client may put several
// limiters' keys in one script call; every other call is its own.
func (c *Client) plan(calls []*call) []*scriptCall {
	var (
		scs    []*scriptCall
		shared *scriptCall // the script call of acquires still open
		n      int         // acquires in it
	)
	for _, g := range groupCalls(calls) {
		if g[0].s != scriptAcquire {
			scs = append(scs, &scriptCall{groups: [][]*call{g}})
			continue
		}
		if shared == nil || !c.acrossLimiters || n+len(g) > maxShared {
			shared, n = &scriptCall{}, 0
			scs = append(scs, shared)
		}
		shared.groups = append(shared.groups, g)
		n += len(g)
	}
	return scs
}

// groupCalls groups the acquires on one limiter with the same rate (up to
// maxShared), in their order; every other call is a group of its own.
func groupCalls(calls []*call) [][]*call {
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
	return *a.scriptRate() == *b.scriptRate()
}

// command builds the script call: EVALSHA, or EVAL with the whole script.
// Its arguments point into the calls and their limiters, which outlive it.
func (sc *scriptCall) command(ctx context.Context, eval bool) *redis.IntSliceCmd {
	first := sc.groups[0][0]
	nk := 0
	for _, g := range sc.groups {
		nk += len(g[0].keys())
	}
	n := 3 + nk // the command, the script, the key count, the keys
	if first.s == scriptAcquire {
		for _, g := range sc.groups {
			n += 4 + 1 + 2*len(g) // the rate, the acquire count, each acquire
		}
	} else {
		n += len(first.args)
	}
	args := sc.argv[:0]
	if n > len(sc.argv) {
		args = make([]any, 0, n)
	}
	if eval {
		args = append(args, "eval", &first.s.src)
	} else {
		args = append(args, "evalsha", &first.s.sha)
	}
	args = append(args, nk)
	for _, g := range sc.groups {
		l := g[0].l
		for _, k := range g[0].keys() {
			args = append(args, &l.keys[k])
		}
	}
	if first.s != scriptAcquire {
		return sc.newCmd(ctx, append(args, first.args...))
	}
	for _, g := range sc.groups {
		args = g[0].l.scriptRate().appendTo(args)
		args = append(args, len(g))
		for _, cl := range g {
			args = append(args, &cl.permits, &cl.member)
		}
	}
	return sc.newCmd(ctx, args)
}

// newCmd returns the command of args. The first one built for sc lives in
// sc.first, which saves an allocation; a later one (sc sent again after
// NOSCRIPT or TRYAGAIN) is new.
func (sc *scriptCall) newCmd(ctx context.Context, args []any) *redis.IntSliceCmd {
	cmd := &sc.first
	if sc.cmd != nil {
		cmd = new(redis.IntSliceCmd)
	}
	*cmd = *redis.NewIntSliceCmd(ctx, args...)
	return cmd
}

// finish gives every call of sc its result, or err.
func (sc *scriptCall) finish(err error) {
	v := sc.cmd.Val()
	if err == nil && sc.groups[0][0].s == scriptAcquire {
		err = acquireReply(v, sc.groups)
	}
	for _, g := range sc.groups {
		for _, cl := range g {
			if cl.err == nil {
				cl.reply, cl.err = v, err
			}
		}
	}
}
