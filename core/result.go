package core

import "time"

// Result is the outcome of one acquire decision.
type Result struct {
	// Allowed reports whether the permits were granted.
	Allowed bool
	// Remaining is the number of permits available after this call.
	Remaining int64
	// RetryAfter is zero when Allowed; otherwise the exact time until the
	// requested permits will be available (unless others take them first).
	RetryAfter time.Duration
	// ResetAfter is the time until every permit issued so far has come back
	// and the limiter is full again.
	ResetAfter time.Duration
	// Rate is the rate in force: the one given with WithRate, else the one
	// stored in Redis.
	Rate Rate
	// Grant identifies the permits this call took, for Limiter.Refund. It is
	// zero when the call was denied.
	Grant Grant

	at int64 // Redis server time of the decision, in Unix milliseconds
}

// A Grant identifies the permits that one acquire took: its entry in the
// limiter's log. Limiter.Refund gives exactly those back.
type Grant struct {
	member string
}

// IsZero reports whether g identifies no grant.
func (g Grant) IsZero() bool { return g.member == "" }
