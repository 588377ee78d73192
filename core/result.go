package core

import (
	"encoding/binary"
	"math/rand/v2"
	"time"
)

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

// newMember returns the log member of one acquire: Redisson's 21-byte
// layout, the byte 0x10, a random 16-byte id, then the permits as a
// little-endian uint32. The id also makes the acquire idempotent: a resent
// script finds its member and does not take the permits again.
func newMember(permits int64) string {
	var m [21]byte
	m[0] = 16
	binary.LittleEndian.PutUint64(m[1:], rand.Uint64())
	binary.LittleEndian.PutUint64(m[9:], rand.Uint64())
	binary.LittleEndian.PutUint32(m[17:], uint32(permits))
	return string(m[:])
}
