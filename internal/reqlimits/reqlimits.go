// Package reqlimits holds what the policies applied to one request share.
// The request's first policy puts a Limits into the request's context, as a
// context of its own whose parent is the request's, and the others find it
// there. An adapter whose exchange is made anew for each request embeds a
// Shared in it, so that the first policy allocates none.
package reqlimits

import (
	"context"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Limits is what the policies applied to one request share. It is used by
// one goroutine at a time, the request's, but for Settle and Settled.
type Limits struct {
	context.Context
	// Lost: a round trip of one of them got no answer in time, at
	// LostAt; the later ones that do not wait have until then, so that the
	// request answers within one timeout.
	Lost   bool
	LostAt time.Time
	// Refused: one of them refused the request; the earlier ones give
	// their grants back.
	Refused bool
	// The RateLimit-Policy and RateLimit lists written so far.
	Policies, Items string
	// The request's headline decision (the X-RateLimit-* headers): the
	// refusal, or else the decision with the fewest permits left; Shown
	// says which kind it is.
	Shown  Shown
	Result core.Result

	// settled: the real cost of the request per policy, as the handler
	// reported it, maybe from another goroutine.
	mu      sync.Mutex
	settled []settlement
}

// Shown is the kind of a request's headline decision: none yet, one that
// served the request, or a refusal, which stands.
type Shown uint8

// The kinds of headline decision.
const (
	None Shown = iota
	Served
	Refusal
)

type settlement struct {
	policy  any
	permits int64
}

type key struct{}

// Value returns l itself for its own key, and the request context's values
// for any other.
func (l *Limits) Value(k any) any {
	if k == (key{}) {
		return l
	}
	return l.Context.Value(k)
}

// Detached returns a context with l's values, but neither the deadline
// nor the cancellation of the request's context: that of a round trip that
// decides the request whether or not its client is still there. Made with
// no allocation.
func (l *Limits) Detached() context.Context { return detached{l} }

type detached struct{ l *Limits }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }
func (d detached) Value(k any) any           { return d.l.Value(k) }

// From returns the Limits of the request whose context is ctx, if a policy
// put them there.
func From(ctx context.Context) (*Limits, bool) {
	l, ok := ctx.Value(key{}).(*Limits)
	return l, ok
}

// Settle records permits as the real cost of the request for policy,
// replacing any recorded before.
func (l *Limits) Settle(policy any, permits int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.settled {
		if l.settled[i].policy == policy {
			l.settled[i].permits = permits
			return
		}
	}
	l.settled = append(l.settled, settlement{policy, permits})
}

// Settled returns the real cost recorded for policy, and whether one was.
func (l *Limits) Settled(policy any) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.settled {
		if s.policy == policy {
			return s.permits, true
		}
	}
	return 0, false
}

// Shared holds, in an adapter's exchange (made for each request), the
// Limits of its request: embedded, it gives the exchange the method
// SharedLimits, through which the request's first policy finds them. It
// belongs to one request for as long as its context or a decision of it is
// in use (handlers, a settle from another goroutine, a refund after the
// response): the exchange must not be pooled or reused for another request.
type Shared struct{ l Limits }

// SharedLimits returns the Limits s holds.
func (s *Shared) SharedLimits() *Limits { return &s.l }
