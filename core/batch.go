package core

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/slot"
)

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
// was busy, still tells that Redis answers, and none, that it fails (see
// health).
type batcher struct {
	c        *Client
	max      int // round trips in flight at once; 0: no bound, no queue
	maxQueue int // calls waiting at once; beyond, ErrOverloaded
	mu       sync.Mutex
	busy     int                  // round trips in flight
	queue    []*waiter            // calls waiting for a round trip
	node     atomic.Pointer[node] // the Redis it sends to, and its health
}

// maxBatch bounds the calls of one pipeline.
const maxBatch = 8 * maxShared

// waiter is one call handed to a runner goroutine.
type waiter struct {
	cl       *call
	deadline time.Time     // the caller's deadline; zero if none
	done     chan struct{} // signalled once, when cl has its reply
	gone     bool          // the caller stopped waiting (its context ended)
	sent     bool          // a round trip took it
	queued   int64         // unix nanos when it queued
}

// do runs cl, alone or in a pipeline with other calls, and returns when cl
// has its reply, or an error when it got none: ctx's error when ctx is done
// first (wrapped in ErrOverloaded if cl was never sent), ErrUnavailable
// while Redis is failing. It reports whether cl was sent.
func (b *batcher) do(ctx context.Context, cl *call) (bool, error) {
	n := b.node.Load()
	if err := n.admit(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err // its time is up before it is sent
	}
	dl, hasDeadline := ctx.Deadline()
	direct := !hasDeadline || b.c.ctxIO && !n.suspect.Load()
	b.mu.Lock()
	free := b.max == 0 || b.busy < b.max
	if free && direct {
		b.busy++
		b.mu.Unlock()
		start, calls := time.Now(), cl.only()
		b.report(b.c.send(ctx, calls), start, calls, !hasDeadline)
		b.next()
		return true, nil
	}
	// Not pooled: a channel made inside a testing/synctest bubble must not
	// be used outside it, and users' tests may run this in bubbles.
	w := &waiter{cl: cl, deadline: dl, done: make(chan struct{}, 1), queued: time.Now().UnixNano()}
	switch {
	case free:
		b.busy++
		batch := []*waiter{w}
		seal(batch)
		b.mu.Unlock()
		go b.run(batch)
	case len(b.queue) >= b.maxQueue:
		b.mu.Unlock()
		return false, fmt.Errorf("%w: %d calls already waiting", ErrOverloaded, b.maxQueue)
	default:
		b.queue = append(b.queue, w)
		b.mu.Unlock()
	}
	select {
	case <-w.done:
		return true, nil
	case <-ctx.Done():
		select {
		case <-w.done: // the reply came too: select chose at random
			return true, nil
		default:
		}
		// A queued call is dropped from its round trip; one already sent
		// completes unseen.
		b.mu.Lock()
		w.gone = true
		sent := w.sent
		b.mu.Unlock()
		if !sent && n.lastOK.Load() > w.queued {
			// Redis answered round trips while it waited: this process
			// was busy, not Redis slow or down (round trips that failed
			// meanwhile tell nothing of this process).
			return false, fmt.Errorf("%w: its deadline came while it waited behind this process's round trips: %w", ErrOverloaded, ctx.Err())
		}
		if dialErr := b.deadDial(cl.l, time.Unix(0, w.queued)); sent && dialErr != nil {
			// Its round trip waits for a Redis that refused, or could
			// not be reached: Redis fails, from this call on.
			return true, n.fail(fmt.Errorf("%w: %w", ctx.Err(), dialErr), cl.l, time.Now())
		}
		return sent, ctx.Err()
	}
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
			batch = append(batch, w)
		}
		n++
	}
	rest := b.queue[n:]
	if len(rest) == 0 {
		rest = nil
	}
	b.queue = rest
	seal(batch)
	return batch
}

// seal marks batch's calls sent and fixes the deadline of their round
// trip: the latest of their callers', but no sooner than roundTripGrace
// from now, or none if one has none. Each caller still waits only until
// its own deadline; the round trip goes on, so that an answer that comes
// late because this process was busy tells that Redis is well, and one
// that never comes, that it is not. A caller that gives up knows that its
// script runs before that deadline or never (see Limiter.Refund). It
// requires that the batcher's lock is held.
func seal(batch []*waiter) {
	if len(batch) == 0 {
		return
	}
	latest := time.Now().Add(roundTripGrace)
	for _, w := range batch {
		if w.deadline.IsZero() {
			latest = time.Time{}
			break
		}
		if w.deadline.After(latest) {
			latest = w.deadline
		}
	}
	var by int64
	if !latest.IsZero() {
		by = latest.UnixMilli() + 1
	}
	for _, w := range batch {
		w.sent = true
		w.cl.sendBy = by
	}
}

// run sends batch as one round trip, wakes its callers, and goes on with
// whatever queued meanwhile. While Redis is failing, the calls of a batch
// fail at once.
func (b *batcher) run(batch []*waiter) {
	for len(batch) > 0 {
		calls := make([]*call, 0, len(batch))
		failed := b.node.Load().admit()
		for _, w := range batch {
			if failed != nil {
				w.cl.err = failed
				if w.cl.debts != nil {
					b.c.owed.putBack(w.cl.l, w.cl.debts, 0) // a payment, not sent
				}
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

// batchContext bounds a pipeline by the deadline its calls were sealed
// with (see seal).
func batchContext(batch []*waiter) (context.Context, context.CancelFunc) {
	if by := batch[0].cl.sendBy; by != 0 {
		return context.WithDeadline(context.Background(), time.UnixMilli(by))
	}
	return context.Background(), func() {}
}

// On a Redis Cluster, a Client keeps one batcher per hash slot, created on
// first use: a pipeline then never spans two slots, hence two masters, so
// decisions on the keys of a master that is down or slow never wait behind
// (or share the deadline of) round trips to it, and the failure of a master
// fails only its own slots' calls at once (see health). The limiter's keys
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
	ctx, cancel := context.WithTimeout(context.Background(), probeDialTimeout)
	_, addr := c.addrOf(ctx, l)
	cancel()
	b.node.Store(c.nodeAt(addr))
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

// follow keeps b on the node that serves l's keys: on a Cluster, after a
// round trip, the master the slot map names for them. When it changed (a
// replica was promoted, the slot moved), the grants this Client made on
// the slot in their window are written into the new master (see recent).
func (b *batcher) follow(l *Limiter) {
	if b.c.slots == nil {
		return
	}
	_, addr := b.c.addrOf(context.Background(), l)
	cur := b.node.Load()
	if addr == "" || addr == cur.addr {
		return
	}
	b.node.Store(b.c.nodeAt(addr))
	if cur.addr != "" {
		b.c.recent.replay(func(g *Limiter) bool { return g.slot == l.slot })
	}
}
