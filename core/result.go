package core

import (
	"encoding/binary"
	"math/rand/v2"
	"time"
)

// Result is the outcome of one acquire decision.
//
// For a Semaphore's TryAcquire, Allowed reports whether the permits were
// granted, Remaining is the number of permits available after the call (0
// while the semaphore has a debt), and RetryAfter, when refused, is the
// time until enough leases end for the permits asked, by Redis's clock: if
// no lease is renewed or released and no one takes the permits first,
// never early; zero when it is not known (permits held with no lease,
// which only a Redisson client takes). The other fields are zero: a
// semaphore has no rate, its Lease takes the place of Grant, and it has no
// denial cache.
type Result struct {
	// Allowed reports whether the permits were granted.
	Allowed bool
	// Remaining is the number of permits available after this call.
	Remaining int64
	// RetryAfter is zero when Allowed; otherwise the time until the
	// requested permits will be available (unless others take them first),
	// never early. It is exact but in two cases: when the permits come back
	// only after the log's oldest 16 grants and some grants hold several
	// permits (see the package's Cost), and when the local denial cache
	// answers a request for more permits than Redis denied, with the time
	// until every permit is back.
	RetryAfter time.Duration
	// ResetAfter is the time until every permit issued so far has come back
	// and the limiter is full again.
	ResetAfter time.Duration
	// Rate is the rate in force: the one given with WithRate, else the one
	// stored in Redis. Of a quota (WithQuota), its Limit as Permits per
	// the length of the current period as Interval.
	Rate Rate
	// Grant identifies the permits this call took, for Limiter.Refund and
	// Limiter.Settle. It is zero when Redis denied the call. When the call
	// failed without a decision from Redis (the error says why), it is the
	// grant the call asked for: a caller that grants the permits by other
	// means, such as a local fallback, passes it to Limiter.Charge once
	// Redis answers again, so that Redis counts those permits, and counts
	// them once even if the call's script ran after all.
	Grant Grant
	// Cached reports that the Client's local denial cache answered, with no
	// round trip: Redis denied this request (or one for fewer permits)
	// before, and it is denied again from memory until the time Redis gave
	// (see WithDenialCache). It is false for every answer Redis made.
	Cached bool

	at    int64 // Redis server time of the decision, in Unix milliseconds
	bound bool  // RetryAfter is a bound, never early, not the exact time
}

// A Grant identifies the permits that one acquire took: its entry in the
// limiter's log (of a quota: its permits in a period's count).
// Limiter.Refund gives exactly those back, and Limiter.Settle changes them
// to the request's real cost.
type Grant struct {
	// at is the grant's time in the log, in Unix ms of Redis's clock: the
	// script's, or for a grant Redis did not decide, the time its acquire
	// was made, by the local clock turned into Redis's with the offset the
	// Client had measured then (fixed, so that Charge writes it where a
	// caller deciding at Time counted it).
	at int64
	// period is the start of a quota's period that Redis counted the
	// grant in, in Unix ms of Redis's clock; 0 for a rate's grant, and
	// for a grant Redis did not decide (found from at when needed).
	period int64
	// sendBy is, for a grant whose call got no answer in time, the
	// deadline of the round trip that carried it (unix ms; 0: its
	// caller's): its script ran before it or never.
	sendBy int64
	// recent is its place in the Client's recent grants, plus 1 (0: not
	// kept there): a refund drops it (see recent.forget).
	recent int32
	state  grantState // what Redis knows of it
	member member     // last: its bytes fill what the fields above leave
}

// grantState is what Redis knows of a grant: the answer of the call that
// asked for it, or that there was none.
type grantState uint8

const (
	// grantDecided: Redis answered the call (a grant in the log).
	grantDecided grantState = iota
	// grantUnsent: the call failed before it was sent: Redis knows nothing
	// of it, unless Limiter.Charge writes it.
	grantUnsent
	// grantLost: the call was sent and got no answer in time: its script
	// may yet run, late.
	grantLost
)

// isZero reports whether g identifies no grant (a Grant is comparable:
// g == Grant{} says the same).
func (g Grant) isZero() bool { return g.member.n == 0 }

// Time returns g's time in Redis's log, to the millisecond: the time
// Redis decided it at or, for a grant Redis did not decide, when its
// acquire was made, by the local clock turned into Redis's with the offset
// the Client measured on its decisions until then. It is the time
// Limiter.Charge writes g at, at which a caller that grants it by other
// means decides (the zero Time for the zero Grant).
func (g Grant) Time() time.Time {
	if g.isZero() {
		return time.Time{}
	}
	return time.UnixMilli(g.at)
}

// memberLen is the length of a rate's log member (see newMember), the
// longest a grant has.
const memberLen = 21

// A member is a grant's log member (see newMember), or a quota's grant
// (see newQuotaMember). It is held by value: a decision makes no string of
// it, and its script call sends its bytes as they are (see MarshalBinary).
type member struct {
	b [memberLen]byte
	n uint8 // its length; 0: none
}

// MarshalBinary returns m's bytes: go-redis sends an argument that has it
// as those bytes. It has a pointer receiver, so that the bytes it returns
// are m's own, not a copy's.
func (m *member) MarshalBinary() ([]byte, error) { return m.b[:m.n], nil }

// String returns m's bytes as a string.
func (m member) String() string { return string(m.b[:m.n]) }

// newMember returns the log member of one acquire: Redisson's 21-byte
// layout, the byte 0x10, a random 16-byte id, then the permits as a
// little-endian uint32. The id also makes the acquire idempotent: a resent
// script finds its member and does not take the permits again.
func newMember(permits int64) member {
	m := member{n: memberLen}
	m.b[0] = 16
	binary.LittleEndian.PutUint64(m.b[1:], rand.Uint64())
	binary.LittleEndian.PutUint64(m.b[9:], rand.Uint64())
	binary.LittleEndian.PutUint32(m.b[17:], uint32(permits))
	return m
}

// settledMember returns the member that replaces member m when its grant is
// settled to permits: the same layout, with the high bit of the id's first
// byte flipped, so that a settled grant is never settled again, and the new
// permits. Redisson reads it as any other member.
func settledMember(m member, permits int64) string {
	b := m.b[:m.n]
	b[1] ^= 0x80
	binary.LittleEndian.PutUint32(b[len(b)-4:], uint32(permits))
	return string(b)
}
