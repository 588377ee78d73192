package core

import (
	"context"
	"encoding/binary"
	"net"
	"time"
)

// DecisionTime returns the Redis server time at which r was decided.
func DecisionTime(r Result) time.Time { return time.UnixMilli(r.at) }

// Keys returns the five Redis keys of l, in script order.
func Keys(l *Limiter) []string { return append([]string(nil), l.keys[:]...) }

// CachedDenials returns the number of entries in c's denial cache.
func CachedDenials(c *Client) int64 {
	if c.denials == nil {
		return 0
	}
	return c.denials.n.Load()
}

// DenialCacheLen returns the number of limiters c's denial cache keeps.
func DenialCacheLen(c *Client) int {
	if c.denials == nil {
		return 0
	}
	return c.denials.m.Len()
}

// Acquire is one acquire of AcquireTogether: its limiter, permits and log
// member (Member makes one with a random id).
type Acquire struct {
	Limiter *Limiter
	Permits int64
	Member  string
}

// Member returns a log member for permits with a random id.
func Member(permits int64) string { return newMember(permits).String() }

// toMember returns the member of s's bytes.
func toMember(s string) member {
	m := member{n: uint8(len(s))}
	copy(m.b[:], s)
	return m
}

// AcquireTogether decides acqs in one round trip, as coalescing does with
// acquires that queue up together: the acquires on one limiter share a
// group, and the limiters share a script call.
func AcquireTogether(ctx context.Context, acqs []Acquire) ([]Result, []error, error) {
	calls := make([]*call, len(acqs))
	for i, a := range acqs {
		if a.Limiter.err != nil {
			return nil, nil, a.Limiter.err
		}
		calls[i] = &call{l: a.Limiter, s: scriptAcquire, permits: a.Permits, member: toMember(a.Member)}
	}
	acqs[0].Limiter.c.send(ctx, calls)
	res, errs := make([]Result, len(acqs)), make([]error, len(acqs))
	for i, cl := range calls {
		res[i], errs[i] = cl.res, cl.err
	}
	return res, errs, nil
}

// AcquireMember is TryAcquire with the given log member, as a resend of an
// earlier call would carry it.
func AcquireMember(ctx context.Context, l *Limiter, permits int64, member string) (Result, error) {
	if err := l.checkPermits(permits); err != nil {
		return Result{}, err
	}
	cl := &call{l: l, s: scriptAcquire, permits: permits, member: toMember(member)}
	if _, err := l.c.do(ctx, cl); err != nil {
		return Result{}, err
	}
	return cl.res, cl.err
}

// ScriptCalls returns how many script calls a round trip of acqs makes.
func ScriptCalls(acqs []Acquire) int {
	calls := make([]*call, len(acqs))
	for i, a := range acqs {
		calls[i] = &call{l: a.Limiter, s: scriptAcquire}
	}
	return len(acqs[0].Limiter.c.plan(calls))
}

// GrantAt returns a grant of permits made at, by the local clock, as a
// failed acquire returns it for a caller that grants the permits by other
// means.
func GrantAt(permits int64, at time.Time) Grant {
	return Grant{member: newMember(permits), at: at.UnixMilli(), state: grantUnsent}
}

// Owed returns the number of changes c owes Redis (see Limiter.Charge).
func Owed(c *Client) int64 { return c.owed.n.Load() }

// FlushEvery is how long the Client's writer waits before it pays what
// no call took.
const FlushEvery = flushEvery

// SemaphoreKeys returns the counter and lease keys of s.
func SemaphoreKeys(s *Semaphore) []string { return []string{s.route.keys[0], s.route.keys[1]} }

// SemaphoreChannel returns the channel s publishes on.
func SemaphoreChannel(s *Semaphore) string { return s.channel }

// NewLease returns a lease of permits new ids, as a failed TryAcquire
// returns it.
func NewLease(permits int64) Lease { return newLease(permits) }

// LeaseIDs returns the ids of l, 16 raw bytes each.
func LeaseIDs(l Lease) []string {
	var ids []string
	for i := 0; i < len(l.ids); i += leaseIDLen {
		ids = append(ids, l.ids[i:i+leaseIDLen])
	}
	return ids
}

// AcquireLease is TryAcquire with the ids of l, as a resend of an earlier
// call would carry them.
func AcquireLease(ctx context.Context, s *Semaphore, l Lease, lease time.Duration) (Lease, Result, error) {
	if err := s.check(lease); err != nil {
		return Lease{}, Result{}, err
	}
	return s.acquire(ctx, l, lease)
}

// QuotaBounds returns the period of q that holds t: its start and the
// start of the next, in q's location.
func QuotaBounds(q Quota, t time.Time) (start, end time.Time) {
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	s, e := q.bounds(t.UnixMilli())
	return time.UnixMilli(s).In(loc), time.UnixMilli(e).In(loc)
}

// QuotaGrantAt returns a quota's grant of permits made at, by the local
// clock, as a failed acquire on a quota returns it.
func QuotaGrantAt(permits int64, at time.Time) Grant {
	return Grant{member: newQuotaMember(permits), at: at.UnixMilli(), state: grantUnsent}
}

// QuotaMargin is how long a quota's counter outlives its period.
const QuotaMargin = time.Minute

// Lost returns g as the grant of an acquire that got no answer in time,
// whose script may or may not have run.
func Lost(g Grant) Grant {
	g.state, g.period = grantLost, 0
	return g
}

// QuotaAcquireAgain sends the acquire that returned g again, as go-redis
// resends a call whose reply was lost.
func QuotaAcquireAgain(ctx context.Context, l *Limiter, g Grant) (Result, error) {
	q, err := l.quotaCall(ctx, "acquire", int64(permitsOf(g.member.String())), &g.member)
	if err != nil {
		return Result{}, err
	}
	return Result{Allowed: q.v[2] == 1, Remaining: q.v[3]}, nil
}

func permitsOf(member string) uint32 {
	return binary.LittleEndian.Uint32([]byte(member[len(member)-4:]))
}

// NoticeOf returns the channel that the next notice of s's channel closes,
// and the function that ends the wait, as TryAcquireWithin waits.
func NoticeOf(c *Client, s *Semaphore) (<-chan struct{}, func()) { return c.notices.wait(s.channel) }

// PollEvery is how often a semaphore waiter asks Redis without a notice.
const PollEvery = pollEvery

// MaxNameLen is the longest limiter name, key prefix included.
const MaxNameLen = maxNameLen

// DefaultDenialCache is how many limiters the denial cache keeps by
// default.
const DefaultDenialCache = defaultDenialCache

// ClientID returns c's id of its PerClient budgets.
func ClientID(c *Client) string { return c.clientID }

// SemaphoreName returns the name of s in Redis, key prefix included.
func SemaphoreName(s *Semaphore) string { return s.route.name }

// SetClockOffset sets what c takes Redis's clock less the local one to be,
// in ms, as its decisions would measure it.
func SetClockOffset(c *Client, ms int64) { c.offset.Store(ms) }

// GrantMember returns g's log member.
func GrantMember(g Grant) string { return g.member.String() }

// Pings is the PING on a connection of its own that tells a Redis that
// fails from a process too busy to hear it (see batcher.silence): nil, or
// why the server is taken for failing.
func Pings(ctx context.Context, dial func(context.Context) (net.Conn, error)) error {
	return pings(ctx, dial)
}

// LateWake is how late past a deadline a goroutine wakes when its process
// is starved.
const LateWake = lateWake

// RoundTripGrace is how long a round trip may wait for its answer past its
// caller's deadline.
const RoundTripGrace = roundTripGrace

// MemberOf returns g's log member.
func MemberOf(g Grant) string { return g.member.String() }

// ChargeScript is the source of the script that pays what a Client owes.
var ChargeScript = scriptCharge.src

// WriteAgain has the Client write g into l's log again, as it does into a
// promoted master for the grants of the last window (recent.replay).
func WriteAgain(l *Limiter, g Grant) {
	l.Charge(Grant{member: g.member, at: g.at, state: grantUnsent})
}

// KeepRecent has c keep its recent grants, as on a deployment whose master
// can change, and returns a func that writes them into l's master again,
// as after a failover (recent.replay).
func KeepRecent(c *Client) (replay func()) {
	c.recent.on = true
	return func() { c.recent.replay(func(*Limiter) bool { return true }) }
}
