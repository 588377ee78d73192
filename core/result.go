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

	at int64 // Redis server time of the decision, in Unix milliseconds
}
