package core

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// batcher runs the round trips of a Client (on a Redis Cluster, of one hash
// slot). A call that finds fewer than max round trips in flight makes its
// own at once, so a lone caller pays nothing; calls that find them all busy
// queue up, and each round trip that ends takes the whole queue with it:
// one pipeline, in which the acquires on one limiter share a script call.
// Throughput then grows with concurrency instead of with connections. With
// max 0 (coalescing off) every call makes its own round trip.
//
// A call with a deadline that go-redis would not honour (it stops its I/O at
// a context's deadline only with ContextTimeoutEnabled) never makes its
// round trip itself: a runner goroutine does, and the call waits for it only
// until its deadline.
type batcher struct {
	c        *Client
	max      int // round trips in flight at once; 0: no bound, no queue
	maxQueue int // calls waiting at once; beyond, ErrOverloaded
	mu       sync.Mutex
	busy     int       // round trips in flight
	queue    []*waiter // calls waiting for a round trip
}

// waiter is one call handed to a runner goroutine.
type waiter struct {
	cl       *call
	deadline time.Time     // the caller's deadline; zero if none
	done     chan struct{} // signalled once, when cl has its reply
	gone     bool          // the caller stopped waiting (its context ended)
}

// DefaultMaxQueue bounds the calls waiting for a round trip in one batcher
// (see WithMaxQueue).
const DefaultMaxQueue = 8192

// do runs cl, alone or in a pipeline with other calls, and returns when cl
// has its reply, or ctx's error when ctx is done first.
func (b *batcher) do(ctx context.Context, cl *call) error {
	dl, hasDeadline := ctx.Deadline()
	direct := b.c.ctxIO || !hasDeadline
	b.mu.Lock()
	free := b.max == 0 || b.busy < b.max
	if free && direct {
		b.busy++
		b.mu.Unlock()
		b.c.send(ctx, []*call{cl})
		b.next()
		return nil
	}
	// Not pooled: a channel made inside a testing/synctest bubble must not
	// be used outside it, and users' tests may run this in bubbles.
	w := &waiter{cl: cl, deadline: dl, done: make(chan struct{}, 1)}
	switch {
	case free:
		b.busy++
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
		// completes unseen. (Each round trip that ends takes the whole
		// queue: a call waits behind no more than the round trips in
		// flight, so one whose deadline came first waited for Redis.)
		b.mu.Lock()
		w.gone = true
		b.mu.Unlock()
		return ctx.Err()
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

// take removes and returns the queued calls that still wait. It requires
// that b.mu is held.
func (b *batcher) take() []*waiter {
	batch := b.queue
	b.queue = nil
	n := 0
	for _, w := range batch {
		if !w.gone {
			batch[n] = w
			n++
		}
	}
	return batch[:n]
}

// run sends batch as one round trip, wakes its callers, and goes on with
// whatever queued meanwhile.
func (b *batcher) run(batch []*waiter) {
	for len(batch) > 0 {
		ctx, cancel := batchContext(batch)
		calls := make([]*call, len(batch))
		for i, w := range batch {
			calls[i] = w.cl
		}
		b.c.send(ctx, calls)
		cancel()
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

// batchContext bounds a pipeline by the latest deadline of its calls, or
// not at all if one has none; each caller still waits only until its own.
func batchContext(batch []*waiter) (context.Context, context.CancelFunc) {
	var latest time.Time
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
