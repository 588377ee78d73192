package core

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// WithQuota makes the limiter count a calendar quota instead of a rate:
// q.Limit permits per q.Period in q.Location's calendar, decided by Redis's
// clock. The limiter's methods then mean the quota's: TryAcquire grants
// while the period's count plus the permits asked stays within the limit,
// and a refusal's RetryAfter and ResetAfter are the time until the next
// period begins; Refund, Settle and Charge change the count of their
// grant's period while it is current; Release takes permits off the
// current period's count; AvailablePermits is what the period has left;
// Expire, ClearExpire and Delete act on the counter. A quota has no rate:
// TrySetRate, SetRate, UpdateRate and Config return an error wrapping
// ErrInvalidOption, as does a limiter given both WithRate and WithQuota.
// A Result's Rate holds the quota as a rate: Limit permits per the length
// of the current period (23, 24 or 25 hours for a Day).
//
// The limiter keeps one counter in Redis, "{N}:quota" for a limiter named
// N (or N:quota when N has a {hash tag}), whatever its limit; it expires a
// minute after its period ends. See the package documentation (Quotas)
// for what a counter remembers of its grants, and so what a resent call
// does.
func WithQuota(q Quota) LimiterOption {
	if err := q.Validate(); err != nil {
		return limiterOptionFunc(func(*Limiter) error { return err })
	}
	if q.Location == nil {
		q.Location = time.UTC
	}
	cq := &codedQuota{quota: q, limit: strconv.FormatInt(q.Limit, 10)}
	// Its identity in the denial cache: no rate's (whose first field is
	// a number or empty).
	cq.id = rateArgs{"quota", cq.limit, strconv.Itoa(int(q.Period)), q.Location.String()}
	return limiterOptionFunc(func(l *Limiter) error {
		l.quota = cq
		return nil
	})
}

// codedQuota is a quota given with WithQuota, with its script argument
// formatted once and the period it last computed.
type codedQuota struct {
	quota Quota
	limit string   // the limit, as quota.lua takes it
	id    rateArgs // its identity in the denial cache
	last  atomic.Pointer[[2]int64]
}

// bounds returns the period that holds ms (Unix ms of Redis's clock): its
// start and the start of the next.
func (cq *codedQuota) bounds(ms int64) (start, end int64) {
	if p := cq.last.Load(); p != nil && p[0] <= ms && ms < p[1] {
		return p[0], p[1]
	}
	start, end = cq.quota.bounds(ms)
	cq.last.Store(&[2]int64{start, end})
	return start, end
}

// The keys a quota's calls declare: its counter alone, kept in place of
// the config hash (keys[0]).
var quotaKeys = []uint8{0}

// quotaKey returns the counter of the quota limiter called name (prefix
// included): "{name}:quota", or "name:quota" when name has a hash tag, in
// the slot of the name's other keys.
func quotaKey(name string) string {
	if strings.IndexByte(name, '{') >= 0 {
		return name + ":quota"
	}
	return "{" + name + "}:quota"
}

// quotaMemberLen is the length of a quota's grant: a 6-byte random id, the
// high bit of its first byte clear, then the permits as a little-endian
// uint32, as quota.lua remembers it.
const quotaMemberLen = 10

func newQuotaMember(permits int64) member {
	m := member{n: quotaMemberLen}
	binary.LittleEndian.PutUint64(m.b[:8], rand.Uint64())
	m.b[0] &= 0x7f
	binary.LittleEndian.PutUint32(m.b[6:], uint32(permits))
	return m
}

// quota.lua's status code for a call whose period does not hold Redis's
// now (see quotaCall).
const codePeriodMismatch = 3

// quotaReply is quota.lua's answer to a call made in one period.
type quotaReply struct {
	v          []int64   // {OK, now, ...}
	start, end int64     // the period, in Unix ms of Redis's clock
	sent       bool      // a call was sent (with an error: it may have run)
	sendBy     int64     // its round trip's deadline (see call)
	at         time.Time // when the last call was sent
}

// quotaCall runs the quota script's call what (acquire, peek, release,
// ttl) with args on the limiter's counter, in the period that holds now by
// Redis's clock: first the one that holds the local clock turned into
// Redis's (see noteClock), and, when Redis's now is not in it (this clock
// is off, or a period ended in flight), the one that holds the now Redis
// answered, twice at most.
func (l *Limiter) quotaCall(ctx context.Context, what string, args ...any) (quotaReply, error) {
	cq := l.quota
	r := quotaReply{at: time.Now()}
	now := r.at.UnixMilli() + l.c.offset.Load()
	for try := 0; ; try++ {
		r.start, r.end = cq.bounds(now)
		cl, first := l.acquireCall()
		cl.ctx, cl.l, cl.s, cl.args = ctx, l, scriptQuota, append([]any{cq.limit, what, r.start, r.end}, args...)
		if try > 0 {
			r.at = time.Now()
		}
		sent, err := l.c.do(ctx, cl)
		r.sent = r.sent || sent
		r.sendBy = max(r.sendBy, cl.sendBy)
		if err != nil {
			return r, err
		}
		reply, err := cl.reply, cl.err // cl has Redis's answer, or its round trip's failure
		if first {
			*cl = call{} // the limiter keeps nothing of the request
		}
		switch {
		case err != nil:
			return r, err
		case len(reply) < 2:
			return r, errShortReply
		case reply[0] == codePeriodMismatch && try < 2:
			now = reply[1]
			continue
		}
		r.v = reply
		return r, quotaStatus(l, r.v)
	}
}

// quotaStatus maps the status of quota.lua's reply v to an error.
func quotaStatus(l *Limiter, v []int64) error {
	switch {
	case v[0] == codeInvalidConfig:
		return fmt.Errorf("%w: the quota counter %q holds a value of another type, or one no limiter wrote", ErrInvalidConfig, l.keys[0])
	case v[0] == codePeriodMismatch:
		return fmt.Errorf("core: the quota's period did not hold redis's time (%d) three times", v[1])
	case v[0] != codeOK:
		return fmt.Errorf("core: unknown script reply code %d", v[0])
	case len(v) < 3:
		return errShortReply
	}
	return nil
}

// acquireQuota takes permits from the current period, if the quota has
// them (see TryAcquire).
func (l *Limiter) acquireQuota(ctx context.Context, permits int64) (r Result, err error) {
	cq := l.quota
	sent := time.Now()
	var in cached
	if dc := l.c.denials; dc != nil {
		if r, in = dc.get(l, &cq.id, permits, sent); in == deniedCached {
			return r, nil
		}
	}
	at := sent.UnixMilli() + l.c.offset.Load() // Redis's time, as this process knows it
	member := newQuotaMember(permits)
	if err := ctx.Err(); err != nil {
		return l.unansweredQuota(in, permits, member, at, -1, fmt.Errorf("not sent: %w", err))
	}
	q, err := l.quotaCall(ctx, "acquire", permits, &member)
	if err == nil && len(q.v) < 5 {
		err = errShortReply
	}
	if err != nil {
		if !q.sent {
			q.sendBy = -1
		}
		return l.unansweredQuota(in, permits, member, at, q.sendBy, err)
	}
	received := time.Now()
	l.c.noteClock(q.v[1], q.at, received)
	r = Result{
		Allowed:    q.v[2] == 1,
		Remaining:  q.v[3],
		ResetAfter: time.Duration(q.v[4]) * time.Millisecond,
		Rate:       Rate{Permits: cq.quota.Limit, Interval: time.Duration(q.end-q.start) * time.Millisecond},
		at:         q.v[1],
	}
	if in == heldCached {
		l.forget() // Redis answered: its answer, not the old denial, stands
	}
	if r.Allowed {
		r.Grant = Grant{member: member, at: q.v[1], state: grantDecided, period: q.start}
	} else {
		r.RetryAfter = r.ResetAfter
		if l.c.denials != nil {
			l.c.denials.put(l.name, &cq.id, permits, q.at, received, r)
		}
	}
	return r, nil
}

// unansweredQuota is unanswered for a quota's acquire.
func (l *Limiter) unansweredQuota(in cached, permits int64, m member, at, sendBy int64, err error) (Result, error) {
	if errors.Is(err, ErrInvalidConfig) {
		return l.undecidedQuota(at), fmt.Errorf("core: acquire: %w", err) // Redis's answer: no grant
	}
	u := l.undecidedQuota(at)
	u.Grant = Grant{member: m, at: at, state: grantUnsent}
	if sendBy >= 0 {
		u.Grant.state, u.Grant.sendBy = grantLost, sendBy
	}
	return l.undecided(in, &l.quota.id, permits, u, fmt.Errorf("core: acquire: %w", err))
}

// undecidedQuota returns the Result of an acquire sent at now (unix ms, by
// the local clock turned into Redis's: see TryAcquire) that Redis did not
// decide: no grant, but the quota's Rate and, in ResetAfter, the time until
// the current period ends, for a caller that decides by other means.
func (l *Limiter) undecidedQuota(now int64) Result {
	start, end := l.quota.bounds(now)
	return Result{
		ResetAfter: time.Duration(end-now) * time.Millisecond,
		Rate:       Rate{Permits: l.quota.quota.Limit, Interval: time.Duration(end-start) * time.Millisecond},
	}
}

// quotaOp returns the arguments of op o in a quota change call (see
// quota.lua): its period, by the one Redis gave its grant or else by its
// time (Grant.at, by Redis's clock), its grant, the
// grant it settles, and whether it may apply only to a grant the counter
// remembers (a settle of a grant whose acquire got no answer from Redis:
// its script may never have run).
func (cq *codedQuota) quotaOp(o *op, args []any) []any {
	at, known := o.period, ""
	if at == 0 {
		at = o.at
		if o.old != "" {
			known = "1"
		}
	}
	start, end := cq.bounds(at)
	return append(args, start, end, o.member, o.old, known)
}

// quotaChange makes op o on the limiter's counter now and reports whether
// it changed the count.
func (l *Limiter) quotaChange(ctx context.Context, o *op) (bool, error) {
	args := l.quota.quotaOp(o, []any{l.quota.limit, "change"})
	cl := &call{ctx: ctx, l: l, s: scriptQuota, args: args}
	if _, err := l.c.do(ctx, cl); err != nil {
		return false, err
	}
	if cl.err != nil {
		return false, cl.err
	}
	if len(cl.reply) < 2 {
		return false, errShortReply
	}
	if err := quotaStatus(l, cl.reply); err != nil {
		return false, err
	}
	return cl.reply[2] > 0, nil
}

// quotaPayment returns the call that makes ops on the limiter's counter.
func (l *Limiter) quotaPayment(ops []*op) *call {
	args := make([]any, 0, 2+5*len(ops))
	args = append(args, l.quota.limit, "change")
	for _, o := range ops {
		args = l.quota.quotaOp(o, args)
	}
	return &call{l: l, s: scriptQuota, args: args, debts: ops}
}

// quotaExpiry returns when the period of grant ends, by the local clock,
// in Unix ms: then a change of it counts no more.
func (l *Limiter) quotaExpiry(grant Grant) int64 {
	at := grant.period
	if at == 0 {
		at = grant.at
	}
	_, end := l.quota.bounds(at)
	return end - l.c.offset.Load()
}
