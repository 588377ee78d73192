package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/slot"
)

// The round trip of every script call: a call goes through Client.do to the
// batcher of its limiter (the Client's, or its hash slot's on a Redis
// Cluster), which sends it at once or, when all round trips in flight are
// busy, with the calls queued meanwhile as one pipeline (send), in which
// the acquires on one limiter share a script call (plan, command).

// A call is one script call on a limiter's keys, waiting for its reply.
// Every script call of a Limiter is one, and every call goes through
// Client.do: the call timeout, the deadline guard, coalescing, the NOSCRIPT
// fallback and the Cluster slot-map reload are applied there, once.
// Acquires sent together share script calls (see plan).
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

// A scriptCall is one EVALSHA: either one call, or the acquires of one or
// more limiters, a group per limiter.
type scriptCall struct {
	groups [][]*call
	cmd    *redis.IntSliceCmd
}

// send makes one round trip for calls and gives each its reply or error.
// The script calls go as one pipeline, and a script the server does not
// have is sent again whole. It returns the round trip's failure, if it
// failed as a whole: a network error or timeout, or a refusal of Redis's
// own (see refusal); a script's error reply is no failure of the round
// trip.
func (c *Client) send(ctx context.Context, calls []*call) error {
	if len(calls) == 1 {
		sc := scriptCall{groups: [][]*call{calls}}
		sc.cmd = sc.command(ctx, false)
		_ = c.rdb.Process(ctx, sc.cmd)
		if isNoScript(sc.cmd.Err()) {
			sc.cmd = sc.command(ctx, true)
			_ = c.rdb.Process(ctx, sc.cmd)
		}
		err := c.failed(deadlineError(ctx, sc.cmd.Err()))
		sc.finish(err)
		return roundTripFailure(err)
	}
	scs := c.plan(calls)
	cmds := make([]redis.Cmder, len(scs))
	for i, sc := range scs {
		sc.cmd = sc.command(ctx, false)
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
	var failed error
	for _, sc := range scs {
		err := deadlineError(ctx, sc.cmd.Err())
		if failed == nil {
			failed = roundTripFailure(err)
		}
		sc.finish(err)
	}
	return c.failed(failed)
}

// roundTripFailure returns err if it is a failure of the round trip as a
// whole, else nil.
func roundTripFailure(err error) error {
	if err == nil {
		return nil
	}
	var reply redis.Error
	if errors.As(err, &reply) && !refusal(reply.Error()) {
		return nil
	}
	return err
}

// refusal reports whether a Redis error reply says that Redis cannot decide
// at all, as opposed to an error of one script call: a read-only replica,
// a server loading its data or without a master, a busy script, missing
// or refused authentication or permission, a Cluster down, a refused write,
// or scripting disabled.
func refusal(msg string) bool {
	for _, p := range refusals {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

var refusals = []string{"READONLY", "LOADING", "MASTERDOWN", "BUSY", "NOAUTH", "WRONGPASS", "NOPERM",
	"CLUSTERDOWN", "TRYAGAIN", "MISCONF", "NOREPLICAS", "ERR unknown command", "ERR Protocol error"}

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
	n := 3 + 5*len(sc.groups) // the command, the script, the key count, the keys
	if first.s == scriptAcquire {
		for _, g := range sc.groups {
			n += 4 + 1 + 2*len(g) // the rate, the acquire count, each acquire
		}
	} else {
		n += len(first.args)
	}
	args := make([]any, 0, n)
	if eval {
		args = append(args, "eval", first.s.src)
	} else {
		args = append(args, "evalsha", first.s.sha)
	}
	args = append(args, 5*len(sc.groups))
	for _, g := range sc.groups {
		l := g[0].l
		args = append(args, &l.keys[0], &l.keys[1], &l.keys[2], &l.keys[3], &l.keys[4])
	}
	if first.s != scriptAcquire {
		return redis.NewIntSliceCmd(ctx, append(args, first.args...)...)
	}
	for _, g := range sc.groups {
		args = g[0].l.scriptRate().appendTo(args)
		args = append(args, len(g))
		for _, cl := range g {
			args = append(args, &cl.permits, &cl.member)
		}
	}
	return redis.NewIntSliceCmd(ctx, args...)
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

// batcher runs the round trips of a Client (on a Redis Cluster, of one hash
// slot). A call that finds fewer than max round trips in flight makes its
// own at once, so a lone caller pays nothing; calls that find them all busy
// queue up, and each round trip that ends takes the queue with it, up to
// maxBatch calls: one pipeline, in which the acquires on one limiter share
// a script call. Throughput then grows with concurrency instead of with
// connections, and no pipeline grows so long that its own size makes it
// miss its callers' deadlines. With max 0 (coalescing off) every call makes
// its own round trip.
//
// A call with a deadline makes its round trip itself when go-redis stops
// its I/O at the deadline (ContextTimeoutEnabled), and Redis has answered
// in time so far. Otherwise a runner goroutine does, and the call waits for
// it only until its deadline, while the round trip may take up to
// roundTripGrace more: a reply late for its caller, because this process
// was busy, still tells that Redis answers, and none, that it fails.
//
// The batcher also tells failures apart. A call whose deadline comes while
// it is still queued, never sent, while Redis went on answering round
// trips, fails with ErrOverloaded: this process's overload, not Redis's
// failure (with no answer meanwhile, Redis is what it waited for). A round trip
// that was sent and failed (a network error, a timeout past the grace while
// Redis answered nothing else, or Redis refusing to decide: see refusal)
// means Redis is failing: from then on, calls fail at once with
// ErrUnavailable, but for the probes, which are sent: the first call at
// once (a lone slow answer is no outage), then one a second; the first
// round trip that succeeds ends it.
type batcher struct {
	c        *Client
	max      int // round trips in flight at once; 0: no bound, no queue
	maxQueue int // calls waiting at once; beyond, ErrOverloaded
	mu       sync.Mutex
	busy     int       // round trips in flight
	queue    []*waiter // calls waiting for a round trip

	suspect atomic.Bool           // a round trip got no answer in its callers' time
	failing atomic.Bool           // the last round trip failed
	since   atomic.Int64          // unix nanos when it began to fail
	probeAt atomic.Int64          // unix nanos from which one call may probe
	failErr atomic.Pointer[error] // what calls fail with meanwhile
	lastOK  atomic.Int64          // unix nanos when one last succeeded
}

// maxBatch bounds the calls of one pipeline.
const maxBatch = 8 * maxShared

// probeEvery is how often a batcher whose Redis is failing sends a call.
const probeEvery = time.Second

// failAfter is how long a round trip of calls without a timeout of their
// own (WithCallTimeout) must wait before its timeout counts as Redis's
// failure; a shorter deadline was the caller's.
const failAfter = 100 * time.Millisecond

// waiter is one call handed to a runner goroutine.
type waiter struct {
	cl       *call
	deadline time.Time     // the caller's deadline; zero if none
	done     chan struct{} // signalled once, when cl has its reply
	gone     bool          // the caller stopped waiting (its context ended)
	sent     bool          // a round trip took it
	probe    bool          // sent while Redis is failing, to see if it answers
	queued   int64         // unix nanos when it queued
}

// do runs cl, alone or in a pipeline with other calls, and returns when cl
// has its reply, or an error when it got none: ctx's error when ctx is done
// first (wrapped in ErrOverloaded if cl was never sent), ErrUnavailable
// while Redis is failing.
func (b *batcher) do(ctx context.Context, cl *call) error {
	probe, ok := b.admit()
	if !ok {
		return *b.failErr.Load()
	}
	dl, hasDeadline := ctx.Deadline()
	direct := !hasDeadline || b.c.ctxIO && !b.suspect.Load()
	b.mu.Lock()
	free := b.max == 0 || b.busy < b.max
	if free && direct {
		b.busy++
		b.mu.Unlock()
		start, calls := time.Now(), []*call{cl}
		b.report(b.c.send(ctx, calls), start, calls, !hasDeadline)
		b.next()
		return nil
	}
	// Not pooled: a channel made inside a testing/synctest bubble must not
	// be used outside it, and users' tests may run this in bubbles.
	w := &waiter{cl: cl, deadline: dl, done: make(chan struct{}, 1), probe: probe, queued: time.Now().UnixNano()}
	switch {
	case free:
		b.busy++
		w.sent = true
		b.mu.Unlock()
		go b.run([]*waiter{w})
	case len(b.queue) >= b.maxQueue:
		b.mu.Unlock()
		return fmt.Errorf("%w: %d calls already waiting", ErrOverloaded, b.maxQueue)
	default:
		b.queue = append(b.queue, w)
		b.mu.Unlock()
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		select {
		case <-w.done: // the reply came too: select chose at random
			return nil
		default:
		}
		// A queued call is dropped from its round trip; one already sent
		// completes unseen.
		b.mu.Lock()
		w.gone = true
		sent := w.sent
		b.mu.Unlock()
		if !sent && b.lastOK.Load() > w.queued {
			// Redis answered round trips while it waited: this process
			// was busy, not Redis slow or down (round trips that failed
			// meanwhile tell nothing of this process).
			return fmt.Errorf("%w: its deadline came while it waited behind this process's round trips: %w", ErrOverloaded, ctx.Err())
		}
		return ctx.Err()
	}
}

// admit reports whether a call may go to Redis: always, unless Redis is
// failing; then one call a second, the probe (probe true).
func (b *batcher) admit() (probe, ok bool) {
	if !b.failing.Load() {
		return false, true
	}
	now := time.Now().UnixNano()
	next := b.probeAt.Load()
	if now < next || !b.probeAt.CompareAndSwap(next, now+int64(probeEvery)) {
		return false, false
	}
	return true, true
}

// report notes the outcome of a round trip of calls sent at start, which
// waited past its callers' deadlines (graced) or not: success ends Redis's
// failing; a failure of Redis starts it, or, from a probe, makes the next
// wait a second. A round trip that got no answer in its callers' time only
// makes the next ones wait longer (on a runner, graced), to tell a failing
// Redis from a busy process; one that got none in that time either counts
// only if Redis answers nothing else (see answers).
func (b *batcher) report(err error, start time.Time, calls []*call, graced bool) {
	now := time.Now()
	switch {
	case err == nil:
		b.lastOK.Store(now.UnixNano())
		if b.suspect.Load() {
			b.suspect.Store(false)
		}
		if b.failing.Load() {
			b.failing.Store(false)
		}
		return
	case errors.Is(err, context.Canceled):
		return // the caller went away
	case errors.Is(err, context.DeadlineExceeded):
		// A timeout is Redis's only when the round trip waited at least as
		// long as one of its calls may: a shorter deadline was a caller's.
		least := time.Duration(0)
		for _, cl := range calls {
			t := cl.l.timeout
			if t <= 0 {
				t = failAfter
			}
			if least == 0 || t < least {
				least = t
			}
		}
		if now.Sub(start) < least {
			return
		}
		if !graced || !b.failing.Load() && b.answers(start, calls[0].l) {
			b.suspect.Store(true)
			return
		}
	}
	e := fmt.Errorf("%w: %w", ErrUnavailable, err)
	b.failErr.Store(&e)
	switch {
	case !b.failing.Load():
		b.since.Store(now.UnixNano())
		b.probeAt.Store(now.UnixNano()) // the next call probes at once
		b.failing.Store(true)
	case start.UnixNano() >= b.since.Load():
		b.probeAt.Store(now.Add(probeEvery).UnixNano()) // a probe failed
	}
}

// answers reports whether Redis answered a round trip ended after start,
// or answers a read of l's key now, within roundTripGrace: a round trip
// that waited past its grace may have been this process's, starved of CPU
// (a reply read after its deadline is lost, however soon it came), and not
// Redis's.
func (b *batcher) answers(start time.Time, l *Limiter) bool {
	if b.lastOK.Load() > start.UnixNano() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), roundTripGrace)
	defer cancel()
	return b.c.rdb.Exists(ctx, l.keys[0]).Err() == nil
}

// next hands the ending round trip's slot to the queue, if any.
func (b *batcher) next() {
	b.mu.Lock()
	batch := b.take()
	if len(batch) == 0 {
		b.busy--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go b.run(batch)
}

// take removes and returns the queued calls that still wait, up to
// maxBatch, and marks them sent. It requires that b.mu is held.
func (b *batcher) take() []*waiter {
	var batch []*waiter
	n := 0
	for n < len(b.queue) && len(batch) < maxBatch {
		if w := b.queue[n]; !w.gone {
			w.sent = true
			batch = append(batch, w)
		}
		n++
	}
	rest := b.queue[n:]
	if len(rest) == 0 {
		rest = nil
	}
	b.queue = rest
	return batch
}

// run sends batch as one round trip, wakes its callers, and goes on with
// whatever queued meanwhile. While Redis is failing, the calls of a batch
// fail at once, but for probes.
func (b *batcher) run(batch []*waiter) {
	for len(batch) > 0 {
		calls := make([]*call, 0, len(batch))
		failing := b.failing.Load()
		for _, w := range batch {
			if failing && !w.probe {
				w.cl.err = *b.failErr.Load()
				continue
			}
			calls = append(calls, w.cl)
		}
		if len(calls) > 0 {
			ctx, cancel := batchContext(batch)
			start := time.Now()
			b.report(b.c.send(ctx, calls), start, calls, true)
			cancel()
		}
		b.mu.Lock()
		for _, w := range batch {
			if !w.gone {
				w.done <- struct{}{}
			}
		}
		batch = b.take()
		if len(batch) == 0 {
			b.busy--
		}
		b.mu.Unlock()
		// Let the callers just woken run before the next round trip: when
		// replies come at once (a Redis answering from memory), this loop
		// would otherwise keep the CPU for a whole time slice.
		runtime.Gosched()
	}
}

// batchContext bounds a pipeline by the latest deadline of its calls, but
// no sooner than roundTripGrace from now, or not at all if one has none.
// Each caller still waits only until its own deadline; the round trip goes
// on, so that an answer that comes late because this process was busy
// tells that Redis is well, and one that never comes, that it is not.
func batchContext(batch []*waiter) (context.Context, context.CancelFunc) {
	latest := time.Now().Add(roundTripGrace)
	for _, w := range batch {
		if w.deadline.IsZero() {
			return context.Background(), func() {}
		}
		if w.deadline.After(latest) {
			latest = w.deadline
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// roundTripGrace is how long a round trip may wait for its answer, past its
// callers' deadlines, before Redis counts as failing (if it then answers
// nothing else within a grace either).
const roundTripGrace = time.Second

// On a Redis Cluster, a Client keeps one batcher per hash slot, created on
// first use: a pipeline then never spans two slots, hence two masters, so
// decisions on the keys of a master that is down or slow never wait behind
// (or share the deadline of) round trips to it, and the failure of a master
// fails only its own slots' calls at once (see batcher). The limiter's keys
// all share one slot, that of its name's hash tag.
type slotBatchers struct {
	max int
	b   [slot.Count]atomic.Pointer[batcher]
}

// batcherFor returns the batcher of l's round trips.
func (c *Client) batcherFor(l *Limiter) *batcher {
	if c.slots == nil {
		return c.batch
	}
	p := &c.slots.b[l.slot]
	if b := p.Load(); b != nil {
		return b
	}
	b := &batcher{c: c, max: c.slots.max, maxQueue: c.batch.maxQueue}
	if p.CompareAndSwap(nil, b) {
		return b
	}
	return p.Load()
}

// clusterSetup readies c for a Cluster client once its options are applied.
func (c *Client) clusterSetup() {
	rc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	c.reload = rc.ReloadState
	c.slots = &slotBatchers{max: c.batch.max}
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

// failed notes a round trip that failed with err. On a Redis Cluster, an
// error that is not Redis's reply (a refused connection, a timeout, a
// closed connection) may mean a master was replaced: the Client asks
// go-redis to reload the slot map, which it does at most once at a time.
// go-redis reloads it by itself only on MOVED replies, which a dead master
// never sends, and every ClusterStateReloadInterval (a minute by default):
// without this, the keys of a failed-over master would keep failing for up
// to that long after their replica took over. It returns err.
func (c *Client) failed(err error) error {
	if c.reload != nil && err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrOverloaded) &&
		!errors.Is(err, ErrUnavailable) { // failed at once, without a round trip
		var reply redis.Error
		if !errors.As(err, &reply) {
			c.reload(context.Background())
		}
	}
	return err
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
