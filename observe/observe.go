// Package observe is the hook through which the middleware reports what it
// does: one call per decision, one per change of the local fallback, and
// one per change of the slots a concurrency limit holds. The
// metrics packages (modules of their own, so this module gains no
// dependency) implement it for Prometheus and OpenTelemetry; any type with
// the three methods can log or count instead.
//
// An Observer is called on the request's goroutine, after the decision and
// before the response is written: it must be fast and must not block. It
// is never given a client key or address, only the policy name, so that
// labels stay few.
package observe

import (
	"context"
	"time"
)

// Outcome is what the middleware did with one request.
type Outcome uint8

// Outcomes, by what the request got.
const (
	// Allowed: within the limit, served.
	Allowed Outcome = iota
	// Denied: over the limit, rejected with 429; or a cost above the rate,
	// which could never be granted, rejected with 413.
	Denied
	// WaitedAllowed: over the limit at first; waited for a permit, then
	// served.
	WaitedAllowed
	// ErrorServed: no decision, served: Redis failed under fail open, or
	// the request has no key under WithMissingKeyServe.
	ErrorServed
	// ErrorRejected: no decision, rejected: 503 when Redis failed under
	// fail closed, 403 for a request with no key under WithMissingKeyDeny,
	// 400 for a cost that cannot be read.
	ErrorRejected
	// DryRunDenied: over the limit, but served: the policy runs dry.
	DryRunDenied
	// FallbackAllowed: decided by the local fallback while Redis cannot
	// decide: served.
	FallbackAllowed
	// FallbackDenied: decided by the local fallback: rejected with 429.
	FallbackDenied
	// Shed: too many decisions waiting in this process for Redis: rejected
	// with 429 and no decision, rather than served unlimited.
	Shed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"allowed", "denied", "waited_allowed", "error_served", "error_rejected",
	"dry_run_denied", "fallback_allowed", "fallback_denied", "shed",
}

// String returns the outcome's name as a metric label: "allowed",
// "denied", "waited_allowed", "error_served", "error_rejected",
// "dry_run_denied", "fallback_allowed", "fallback_denied" or "shed"; and
// "unknown" for any other value, so that the outcomes are those from 0 up
// to the first unknown one.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Decision is what one policy did with one request.
type Decision struct {
	// Policy is the policy's name.
	Policy string
	// Outcome is what the request got.
	Outcome Outcome
	// Permits is the request's cost.
	Permits int64
	// Remaining is the permits left after the decision (0 when there was
	// none).
	Remaining int64
	// RetryAfter is the wait until the request could be granted, when it
	// was not.
	RetryAfter time.Duration
	// Latency is the time the decision took, waits included.
	Latency time.Duration
	// Err is what went wrong, or nil: why Redis could not decide (see
	// RedisFailed), or a key, rate or cost function of the request that
	// failed (the policy decided all the same, by its rules), or both.
	Err error
	// RedisFailed reports whether Redis was to decide and could not: it
	// failed, answered too late, or could not use the limiter's keys (a key
	// of another type), or the call waited in this process too long. Its
	// outcomes are the fallback's, Shed, and ErrorServed or ErrorRejected
	// of fail open or closed; or Denied (DryRunDenied), of a client that
	// Redis denied before, until its retry time (the denial cache).
	RedisFailed bool
}

// LatencyBuckets are the upper bounds, in seconds, of the decision latency
// histograms of the metrics packages: 50 µs to 1 s. The edges around the
// default decision timeout (100 ms) are at 90 ms and 125 ms, not at it, so
// that decisions that end at the timeout (100 ms and a few) fall in one
// bucket with them and a quantile over them reads 0.1 s, not 0.2 s.
var LatencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 90e-3, 125e-3, 250e-3, 500e-3, 1}

// An Observer receives the middleware's decisions. Its methods are called
// concurrently.
type Observer interface {
	// Decision is called once per decision of a policy, with the request's
	// context: a tracer finds the request's span there.
	Decision(ctx context.Context, d Decision)
	// Fallback is called when a policy starts deciding in memory because
	// Redis cannot (active), and when Redis decides again.
	Fallback(policy string, active bool)
	// Held is called when the slots that a concurrency policy's requests
	// hold in this process change, by delta: a request took delta slots,
	// or gave -delta back. Their sum is the slots in use.
	Held(policy string, delta int64)
}
