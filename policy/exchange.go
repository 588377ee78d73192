package policy

import (
	"context"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// An Exchange is one request and its response, as an adapter presents
// them to a Policy: the request itself, a way to replace its context, and
// the response's header. An Exchange is used only during the call it is
// passed to, but for the Shared it may hold (see Shared).
type Exchange interface {
	keyfunc.Request
	// SetContext replaces the request's context with ctx, which the
	// request's next handlers read. The first policy applied to a request
	// keeps there what the request's limits share.
	SetContext(ctx context.Context)
	// SetHeader sets the response header field name, in canonical form
	// (http.CanonicalHeaderKey), to value, replacing any value it had; an
	// empty value removes the field.
	SetHeader(name, value string)
}

// limits is what the policies applied to one request share. The first of
// them puts it into the request's context, as a context of its own whose
// parent is the request's, and the others find it there; it is used by
// one goroutine at a time, the request's.
type limits struct {
	context.Context
	// lost: a round trip of one of them got no answer in time, by
	// deadline; the later ones that do not wait have until then, so that
	// the request answers within one timeout.
	lost     bool
	deadline time.Time
	// refused: one of them refused the request; the earlier ones give
	// their grants back.
	refused bool
	// The RateLimit-Policy and RateLimit lists written so far.
	policies, items string
	// The request's headline decision (ResultFrom, and the X-RateLimit-*
	// headers): the refusal, or else the decision with the fewest permits
	// left; shown says which kind it is.
	shown  shown
	result core.Result

	// settled: the real cost of the request per policy, as the handler
	// reported it (Policy.Settle), maybe from another goroutine.
	mu      sync.Mutex
	settled []settlement
}

type settlement struct {
	p       *Policy
	permits int64
}

// settledFor returns the real cost reported for p, and whether one was.
func (l *limits) settledFor(p *Policy) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.settled {
		if s.p == p {
			return s.permits, true
		}
	}
	return 0, false
}

// shown is the kind of a request's headline decision: none yet, one that
// served the request, or a refusal, which stands.
type shown uint8

const (
	shownNone shown = iota
	shownServed
	shownRefusal
)

// headline makes d the request's headline decision, and reports whether it
// did: a refusal replaces a served decision, and a served decision one
// with more permits left. A decision that no limiter made (no key, a cost
// refused) is never the headline.
func (l *limits) headline(d *Decision) bool {
	if d.prep == nil || d.Result.Rate.Permits == 0 || l.shown == shownRefusal {
		return false
	}
	if d.Status == 0 && l.shown == shownServed && d.Result.Remaining >= l.result.Remaining {
		return false
	}
	l.shown, l.result = shownServed, d.Result
	if d.Status != 0 {
		l.shown = shownRefusal
	}
	return true
}

// ResultFrom returns the decision of the request whose context is ctx,
// once a policy decided it, and whether there is one: the refusal, in a
// deny handler, or, in the handler of a request served, the decision
// with the fewest permits left of the policies that limit it (the one its
// X-RateLimit-* headers show). Adapters read it from their framework's
// request with a ResultFrom of their own.
func ResultFrom(ctx context.Context) (core.Result, bool) {
	l, ok := ctx.Value(limitsKey{}).(*limits)
	if !ok || l.shown == shownNone {
		return core.Result{}, false
	}
	return l.result, true
}

type limitsKey struct{}

// Value returns the limits themselves for their own key, and the request
// context's values for any other.
func (l *limits) Value(key any) any {
	if key == (limitsKey{}) {
		return l
	}
	return l.Context.Value(key)
}

// Shared holds what the policies applied to one request share. An
// Exchange with a method SharedLimits() *Shared gives it to the request's
// first policy, which then allocates none: an adapter's exchange, made for
// each request anyway, can hold one. The zero value is ready to use. A
// Shared belongs to one request for as long as its context or a Decision
// of it is in use (handlers, Settle from other goroutines, a refund after
// the response): it must not be copied, pooled or used for another
// request. When the method returns nil, the policy allocates its own.
type Shared struct{ l limits }

// limitsOf returns the limits of x's request, putting new ones into its
// context when it has none yet: those x holds (see Shared), if it does.
func limitsOf(x Exchange) *limits {
	ctx := x.Context()
	if l, ok := ctx.Value(limitsKey{}).(*limits); ok {
		return l
	}
	var s *Shared
	if h, ok := x.(interface{ SharedLimits() *Shared }); ok {
		s = h.SharedLimits()
	}
	if s == nil {
		s = new(Shared)
	}
	l := &s.l
	l.Context = ctx
	x.SetContext(l)
	return l
}
