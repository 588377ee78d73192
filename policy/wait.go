package policy

import (
	"context"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
)

// waits are the requests waiting for a permit in wait mode. Waiters on one
// key take turns, first come first served; a request joins only when its
// turn can come within its maximum wait, estimated from the exact retry
// time of the first permit and the permits the waiters ahead of it need at
// the limit's rate (of a quota, whose permits all come back at the
// boundary: whether the next period's limit holds theirs and its own). A
// request that cannot get a permit in time is rejected at once.
type waits struct {
	maxWait time.Duration
	slots   chan struct{} // one per waiter of the policy
	perKey  int

	mu   sync.Mutex
	keys map[string][]chan struct{} // per key, the waiters in turn order
}

func newWaits(maxWait time.Duration, maxWaiters, perKey int) *waits {
	return &waits{maxWait: maxWait, slots: make(chan struct{}, maxWaiters), perKey: perKey, keys: map[string][]chan struct{}{}}
}

// wait waits for permits on l, whose denial is in r, puts the new result
// in r, and returns whether the request waited. It leaves the denial at
// once when the request cannot get the permits in time, and returns an
// error when Redis did not decide, with the result of the failed call.
func (w *waits) wait(ctx context.Context, p *Policy, l *core.Limiter, key string, cost int64, r *core.Result) (bool, error) {
	denial := *r
	// The waiters ahead take the next permits: each needs about its cost's
	// share of the interval.
	fits := func(ahead int, left time.Duration) bool {
		if p.kind == kindQuota {
			// No pace to divide the period by: every permit comes back at
			// the boundary, RetryAfter away, and the waiters ahead take
			// theirs first.
			return denial.RetryAfter <= left && int64(ahead+1)*cost <= denial.Rate.Permits
		}
		est := denial.RetryAfter + time.Duration(ahead)*perPermit(denial.Rate, cost)
		return denial.RetryAfter <= left && est <= left
	}
	left, leave, ok := w.turn(ctx, key, fits)
	if !ok {
		return false, nil
	}
	defer leave()
	_, err := p.acquire(ctx, l, cost, left, r)
	switch {
	case err == nil:
		return r.Allowed, nil
	case ctx.Err() != nil:
		// The client went away: keep the denial, and give back what the
		// call asked, which Redis may have granted.
		_, _ = l.Refund(context.WithoutCancel(ctx), r.Grant)
		*r = denial
		return false, nil
	}
	return false, err // r.Grant: what a local grant records
}

// waitSlot waits for cost slots of s, whose refusal was r, and returns
// the lease and result, and whether the request waited; as wait. A slot's
// wait cannot be known: a request waits if it finds room in the queue.
func (w *waits) waitSlot(ctx context.Context, p *Policy, s *core.Semaphore, key string, cost int64, r core.Result) (core.Lease, core.Result, bool, error) {
	left, leave, ok := w.turn(ctx, key, func(int, time.Duration) bool { return true })
	if !ok {
		return core.Lease{}, r, false, nil
	}
	defer leave()
	lease, got, err := s.TryAcquireWithin(ctx, cost, p.lease, left)
	switch {
	case err == nil:
		return lease, got, got.Allowed, nil
	case ctx.Err() != nil: // the client went away: keep the refusal, as wait
		p.giveBack(context.WithoutCancel(ctx), s, lease)
		return core.Lease{}, r, false, nil
	}
	return lease, got, false, err // lease: what a local grant holds
}

// turn queues a request on key and waits for its turn: it returns the
// time left of the maximum wait and a function that ends the turn, or
// false, at once, when the request cannot wait: too many waiters, its
// wait does not fit what is left of the maximum wait and of ctx's
// deadline (fits, given the number of waiters ahead), or the client went
// away.
func (w *waits) turn(ctx context.Context, key string, fits func(ahead int, left time.Duration) bool) (time.Duration, func(), bool) {
	turn, ahead, ok := w.join(key)
	if !ok {
		return 0, nil, false
	}
	left := w.maxWait
	if dl, ok := ctx.Deadline(); ok {
		left = min(left, time.Until(dl))
	}
	if !fits(ahead, left) {
		w.leave(key, turn)
		return 0, nil, false
	}
	select {
	case w.slots <- struct{}{}:
	default: // too many waiters: reject at once
		w.leave(key, turn)
		return 0, nil, false
	}
	leave := func() { <-w.slots; w.leave(key, turn) }
	start := time.Now()
	select {
	case <-turn:
	case <-ctx.Done(): // the client went away
		leave()
		return 0, nil, false
	}
	return w.maxWait - time.Since(start), leave, true
}

// perPermit is the part of the interval that cost permits take at rate r.
func perPermit(r core.Rate, cost int64) time.Duration {
	if r.Permits <= 0 {
		return 0
	}
	return time.Duration(float64(r.Interval) * float64(cost) / float64(r.Permits))
}

// join queues a waiter on key: its turn channel (closed when it is first),
// the number of waiters ahead, and false when the key has as many waiters
// as it may.
func (w *waits) join(key string) (chan struct{}, int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.keys[key]
	if len(q) >= w.perKey {
		return nil, 0, false
	}
	turn := make(chan struct{})
	if len(q) == 0 {
		close(turn)
	}
	w.keys[key] = append(q, turn)
	return turn, len(q), true
}

// leave takes turn out of key's queue and, if it was first, gives the turn
// to the next.
func (w *waits) leave(key string, turn chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.keys[key]
	for i, t := range q {
		if t != turn {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if i == 0 && len(q) > 0 {
			close(q[0])
		}
		break
	}
	if len(q) == 0 {
		delete(w.keys, key)
	} else {
		w.keys[key] = q
	}
}
