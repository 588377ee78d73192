package policy

import (
	"context"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/reqlimits"
	"github.com/redlimit/redlimit/keyfunc"
)

// An Exchange is one request and its response, as an adapter presents
// them to a Policy: the request itself, a way to replace its context, and
// the response's header. An Exchange is used only during the call it is
// passed to.
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

// limitsOf returns what the policies applied to x's request share,
// putting it into the request's context when it is not there yet: into
// the storage x holds when it is one of this module's adapters' exchanges
// (which embed a reqlimits.Shared), or else into new storage.
func limitsOf(x Exchange) *reqlimits.Limits {
	ctx := x.Context()
	if l, ok := reqlimits.From(ctx); ok {
		return l
	}
	var l *reqlimits.Limits
	if h, ok := x.(interface{ SharedLimits() *reqlimits.Limits }); ok {
		l = h.SharedLimits()
	}
	if l == nil {
		l = new(reqlimits.Limits)
	}
	l.Context = ctx
	x.SetContext(l)
	return l
}

// headline makes d the headline decision of the request whose limits are
// l (ResultFrom, and the X-RateLimit-* headers), and reports whether it
// did: a refusal replaces a served decision, and a served decision one
// with more permits left. A decision that no limiter made (no key, a cost
// refused) is never the headline.
func headline(l *reqlimits.Limits, d *Decision) bool {
	if d.prep == nil || d.Result.Rate.Permits == 0 || l.Shown == reqlimits.Refusal {
		return false
	}
	if d.Status == 0 && l.Shown == reqlimits.Served && d.Result.Remaining >= l.Result.Remaining {
		return false
	}
	l.Shown, l.Result = reqlimits.Served, d.Result
	if d.Status != 0 {
		l.Shown = reqlimits.Refusal
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
	l, ok := reqlimits.From(ctx)
	if !ok || l.Shown == reqlimits.None {
		return core.Result{}, false
	}
	return l.Result, true
}
