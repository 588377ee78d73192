package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/internal/slot"
)

// Limiter is one named rate limiter in Redis. Limiters are cheap values
// around a name, one allocation of about 1 KB with the call of their first
// decision: create them freely, for instance one per client IP.
// A Limiter is safe for concurrent use by multiple goroutines.
type Limiter struct {
	c       *Client
	name    string
	keys    [5]string     // config, value, value:<id>, permits, permits:<id>
	decl    []uint8       // the keys its decisions declare (see declared)
	err     error         // a bad name or option, returned by every call
	coded   *codedRate    // the rate given with WithRate, or nil
	quota   *codedQuota   // the quota given with WithQuota, or nil
	fixed   bool          // every script takes decl (a quota's, a semaphore's)
	timeout time.Duration // bound of each round trip, when > 0
	slot    uint16        // the Cluster hash slot of its keys, when batched per slot
	// first is the call of its first acquire, allocated with it by
	// Client.Limiter (nil once an acquire took it): a limiter made for
	// one decision, as the middleware makes one per request, costs one
	// allocation with its call, not two.
	first atomic.Pointer[call]
}

// codedRate is a rate given with WithRate, with its script arguments
// formatted once.
type codedRate struct {
	rate Rate
	args *rateArgs
}

// A LimiterOption configures a Limiter.
type LimiterOption interface {
	apply(*Limiter) error
}

type limiterOptionFunc func(*Limiter) error

func (f limiterOptionFunc) apply(l *Limiter) error { return f(l) }

// WithRate gives the limiter a code-defined rate. Each decision then creates
// the rate in Redis if it is absent and updates it in place, keeping the
// history, if the stored rate differs: one round trip, never
// ErrNotInitialized. The limiter's keys always expire when it is idle: a zero
// r.KeepAlive means two Intervals, and an idle limiter's keys live between
// one Interval (after which it is full again, as if new) and KeepAlive past
// its last grant. When several processes give different rates for one name,
// the last writer wins.
func WithRate(r Rate) LimiterOption {
	if err := r.Validate(); err != nil {
		return limiterOptionFunc(func(*Limiter) error { return err })
	}
	r = r.withKeepAlive()
	cr := &codedRate{rate: r, args: newRateArgs(r)}
	return limiterOptionFunc(func(l *Limiter) error {
		l.coded = cr
		return nil
	})
}

// WithCallTimeout bounds every round trip to Redis made by the limiter, or
// the semaphore, to d, on top of the context's own deadline. Waits in
// TryAcquireWithin and Acquire are not round trips: they end with the
// context or their maximum wait, and each attempt they make gets its own d.
// A call that runs out of time returns an error wrapping
// context.DeadlineExceeded. The default, 0, leaves the context alone.
func WithCallTimeout(d time.Duration) interface {
	LimiterOption
	SemaphoreOption
} {
	return callTimeout(d)
}

// callTimeout is WithCallTimeout's option, for a Limiter or a Semaphore.
type callTimeout time.Duration

func (d callTimeout) apply(l *Limiter) error {
	if d < 0 {
		return fmt.Errorf("%w: negative call timeout %v", ErrInvalidOption, time.Duration(d))
	}
	l.timeout = time.Duration(d)
	return nil
}

func (d callTimeout) applySemaphore(s *Semaphore) error { return d.apply(s.route) }

// Limiter returns the limiter called name (after the Client's key prefix).
// It does no I/O. An invalid name or option is reported by every call made
// on the returned Limiter, as an error wrapping ErrInvalidName or the
// option's error.
func (c *Client) Limiter(name string, opts ...LimiterOption) *Limiter {
	lc := &struct {
		l     Limiter
		first call
	}{}
	lc.l.first.Store(&lc.first)
	return c.setUp(&lc.l, name, opts)
}

// setUp makes l the limiter called name with opts, and returns it.
func (c *Client) setUp(l *Limiter, name string, opts []LimiterOption) *Limiter {
	l.c = c
	l.name, l.keys = c.keysFor(name)
	if c.slots != nil {
		l.slot = uint16(slot.Of(l.name))
	}
	if l.err = checkName(l.name); l.err != nil {
		return l
	}
	for _, o := range opts {
		if o == nil {
			l.err = fmt.Errorf("%w: nil limiter option", ErrInvalidOption)
			return l
		}
		if l.err = o.apply(l); l.err != nil {
			return l
		}
	}
	if l.quota != nil {
		if l.coded != nil {
			l.err = fmt.Errorf("%w: a limiter counts a rate (WithRate) or a quota (WithQuota), not both", ErrInvalidOption)
			return l
		}
		l.keys[0], l.decl, l.fixed = quotaKey(l.name), quotaKeys, true
		return l
	}
	l.decl = declared(l.coded)
	return l
}

// The keys, of the five, that a limiter's decisions declare to their
// scripts: every key they may touch, and no other, so that a Redis Cluster
// moving the limiter's slot answers with the keys where they are, not
// TRYAGAIN for keys a script never uses. A rate given in code declares its
// own type's three; a rate stored in Redis, whose type a script reads, all
// five.
var (
	overallKeys   = []uint8{0, 1, 3}
	perClientKeys = []uint8{0, 2, 4}
	allKeys       = []uint8{0, 1, 2, 3, 4}
)

// declared returns the keys a limiter of rate coded (nil: stored)
// declares.
func declared(coded *codedRate) []uint8 {
	switch {
	case coded == nil:
		return allKeys
	case coded.rate.Type == PerClient:
		return perClientKeys
	}
	return overallKeys
}

// Name returns the limiter's name in Redis: the Client's key prefix and the
// name given to Limiter. It is the key of a rate's config hash (a quota's
// counter is named after it: see WithQuota).
func (l *Limiter) Name() string { return l.name }

// TrySetRate stores r as the limiter's rate if the limiter has none, and
// reports whether it did. It never changes an existing rate or any state.
// On a limiter with WithRate, a zero r.KeepAlive means two Intervals, as
// there: its keys always expire.
func (l *Limiter) TrySetRate(ctx context.Context, r Rate) (bool, error) {
	if err := l.check(r); err != nil {
		return false, err
	}
	v, err := l.eval(ctx, scriptTrySetRate, newRateArgs(l.stored(r)))
	if err != nil {
		return false, fmt.Errorf("core: try set rate: %w", err)
	}
	return v[1] == 1, nil
}

// SetRate stores r as the limiter's rate, replacing any other, and resets
// the state: every permit is available again (for PerClient, this Client's).
// A zero r.KeepAlive removes any TTL from the config, except on a limiter
// with WithRate, where it means two Intervals.
func (l *Limiter) SetRate(ctx context.Context, r Rate) error {
	_, err := l.setRate(ctx, r, "set")
	return err
}

// UpdateRate replaces the limiter's rate with r and keeps the permits granted
// in the new window: the permits available become max(0, r.Permits - permits
// granted within the last r.Interval). A change of Type clears the state.
// It reports false, writing nothing, when the limiter has no rate.
func (l *Limiter) UpdateRate(ctx context.Context, r Rate) (bool, error) {
	return l.setRate(ctx, r, "update")
}

func (l *Limiter) setRate(ctx context.Context, r Rate, mode string) (bool, error) {
	if err := l.check(r); err != nil {
		return false, err
	}
	defer l.forget()
	v, err := l.eval(ctx, scriptSetRate, newRateArgs(l.stored(r)), mode)
	if err != nil {
		return false, fmt.Errorf("core: %s rate: %w", mode, err)
	}
	return v[1] == 1, nil
}

// stored returns r as it is stored: on a limiter with WithRate, whose keys
// always expire, with its KeepAlive defaulted as WithRate does.
func (l *Limiter) stored(r Rate) Rate {
	if l.coded != nil {
		return r.withKeepAlive()
	}
	return r
}

// Config returns the rate stored in Redis, or an error wrapping
// ErrNotInitialized when there is none.
func (l *Limiter) Config(ctx context.Context) (Rate, error) {
	switch {
	case l.err != nil:
		return Rate{}, l.err
	case l.quota != nil:
		return Rate{}, l.noRate()
	}
	v, err := l.eval(ctx, scriptConfig, nil)
	if err != nil {
		return Rate{}, fmt.Errorf("core: config: %w", err)
	}
	return parseRate(v[1:]), nil
}

// TryAcquire takes permits if they are available now and never waits.
// A denial is not an error: Result.Allowed is false and Result.RetryAfter
// says when the permits will be available.
//
// When Redis cannot decide (an error wrapping ErrUnavailable, a timeout or
// another Redis error), or the call is not sent (ErrOverloaded, or ctx
// done before it), Result.Grant is the grant the call asked for, for a
// caller that grants the permits by other means (see Limiter.Charge). On a
// quota (WithQuota), such a Result also holds the quota's Rate and, in
// ResetAfter, the time until the current period ends, by the local clock
// turned into Redis's with the offset measured on the Client's decisions,
// so that such a caller knows the period it grants in; so does the Result
// of a call that Redis refused with ErrInvalidConfig, which has no Grant.
// But when Redis gave no answer (it fails, or the call's time ran out) to
// a call that it denied before, whose permits may not be back yet, the
// Result is that denial, from the denial cache (Cached, with no Grant: the
// grant the call asked for is given back should its script run late), with
// the error: see WithDenialCache.
func (l *Limiter) TryAcquire(ctx context.Context, permits int64) (Result, error) {
	if err := l.checkPermits(permits); err != nil {
		return Result{}, err
	}
	return l.acquire(ctx, permits)
}

func (l *Limiter) acquire(ctx context.Context, permits int64) (r Result, err error) {
	if l.quota != nil {
		return l.acquireQuota(ctx, permits)
	}
	sent := time.Now()
	rate := l.scriptRate()
	var in cached
	if dc := l.c.denials; dc != nil {
		if r, in = dc.get(l, rate, permits, sent); in == deniedCached {
			return r, nil
		}
	}
	at := sent.UnixMilli() + l.c.offset.Load() // Redis's time, as this process knows it
	m := newMember(permits)
	if err := ctx.Err(); err != nil {
		return l.unanswered(in, rate, permits, m, at, -1, fmt.Errorf("not sent: %w", err))
	}
	cl, first := l.acquireCall()
	cl.ctx, cl.l, cl.s, cl.permits, cl.member = ctx, l, scriptAcquire, permits, m
	wasSent, err := l.c.do(ctx, cl)
	sendBy := cl.sendBy
	if err == nil { // cl has Redis's answer, or its round trip's failure
		r, err = cl.res, cl.err
		if first {
			*cl = call{} // the limiter keeps nothing of the request
		}
	} else if !wasSent {
		sendBy = -1
	}
	if err != nil {
		return l.unanswered(in, rate, permits, m, at, sendBy, err)
	}
	received := time.Now()
	l.c.noteClock(r.at, sent, received)
	if in == heldCached {
		l.forget() // Redis answered: its answer, not the old denial, stands
	}
	if r.Allowed {
		r.Grant.at = r.at
		r.Grant.recent = l.c.recent.add(l, r.Grant)
	} else if l.c.denials != nil {
		l.c.denials.put(l.name, rate, permits, sent, received, r)
	}
	return r, nil
}

// unanswered returns the outcome of an acquire of permits at rate, with
// log member m, which Redis did not decide (err), or refused to (its
// answer an error): sent at Redis's time at, its round trip's deadline
// sendBy, or -1 when it was not sent. The cache held in of the limiter
// (see undecided).
func (l *Limiter) unanswered(in cached, rate *rateArgs, permits int64, m member, at, sendBy int64, err error) (Result, error) {
	if errors.Is(err, ErrPermitsExceedRate) || errors.Is(err, ErrNotInitialized) || errors.Is(err, ErrInvalidConfig) {
		return Result{}, fmt.Errorf("core: acquire: %w", err) // Redis's answer
	}
	u := Result{Grant: Grant{member: m, at: at, state: grantUnsent}}
	if sendBy >= 0 {
		u.Grant.state, u.Grant.sendBy = grantLost, sendBy
	}
	return l.undecided(in, rate, permits, u, fmt.Errorf("core: acquire: %w", err))
}

// acquireCall returns the call of an acquire, zero: the one allocated with
// the limiter, for its first (then first is true; the caller clears it once
// answered, as the limiter may outlive the request), else a new one.
func (l *Limiter) acquireCall() (cl *call, first bool) {
	if l.first.Load() != nil {
		if cl = l.first.Swap(nil); cl != nil {
			return cl, true
		}
	}
	return new(call), false
}

// undecided returns the outcome of an acquire of permits at rate that
// Redis did not decide (err): the undecided Result u; or, when Redis gave
// no answer (it fails, or the call's time ran out: not when this process
// was too busy to send it) and the cache holds (in) a denial of the call
// past its freshness whose permits may not be back yet, that denial, the
// grant the call asked for given back should its script run late. The
// error is err either way.
func (l *Limiter) undecided(in cached, rate *rateArgs, permits int64, u Result, err error) (Result, error) {
	if in != heldCached || errors.Is(err, ErrOverloaded) ||
		!errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return u, err
	}
	r, ok := l.c.denials.held(l, rate, permits, time.Now())
	if !ok {
		return u, err
	}
	if u.Grant.state == grantLost {
		l.oweLate(l.settleOp(u.Grant, 0), u.Grant)
	}
	return r, err
}

// forget drops the limiter's cached denial after a change that may free
// permits early.
func (l *Limiter) forget() {
	if l.c.denials != nil {
		l.c.denials.drop(l.name)
	}
}

// TryAcquireWithin takes permits, waiting up to maxWait for them. It waits
// only when the exact time until the permits are available fits in what is
// left of maxWait and of ctx's deadline; otherwise it returns the denial at
// once (Redisson sleeps out the whole timeout). A negative maxWait counts as
// zero. Cancelling ctx ends the wait with ctx's error.
func (l *Limiter) TryAcquireWithin(ctx context.Context, permits int64, maxWait time.Duration) (Result, error) {
	if err := l.checkPermits(permits); err != nil {
		return Result{}, err
	}
	deadline := time.Now().Add(max(maxWait, 0))
	for {
		r, err := l.acquire(ctx, permits)
		if err != nil || r.Allowed {
			return r, err
		}
		left := time.Until(deadline)
		if d, ok := ctx.Deadline(); ok {
			left = min(left, time.Until(d))
		}
		if r.RetryAfter > left {
			return r, nil
		}
		if err := sleep(ctx, min(max(r.RetryAfter, time.Millisecond)+jitter(r.RetryAfter), left)); err != nil {
			return Result{}, fmt.Errorf("core: try acquire within: %w", err)
		}
	}
}

// Acquire takes permits, waiting as long as it takes. It returns early with
// an error wrapping context.DeadlineExceeded when the permits will not be
// available before ctx's deadline, and with ctx's error when ctx is done.
func (l *Limiter) Acquire(ctx context.Context, permits int64) error {
	if err := l.checkPermits(permits); err != nil {
		return err
	}
	for {
		r, err := l.acquire(ctx, permits)
		if err != nil || r.Allowed {
			return err
		}
		wait := max(r.RetryAfter, time.Millisecond) + jitter(r.RetryAfter)
		if d, ok := ctx.Deadline(); ok && time.Until(d) < r.RetryAfter {
			return fmt.Errorf("core: acquire: permits not available before the deadline: %w", context.DeadlineExceeded)
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("core: acquire: %w", err)
		}
	}
}

// jitter returns a small random delay added to a wait, so that waiters that
// were denied together do not all retry in the same millisecond.
func jitter(wait time.Duration) time.Duration {
	limit := min(wait/16, 5*time.Millisecond)
	if limit <= 0 {
		return 0
	}
	return rand.N(limit)
}

// sleep waits for d and returns nil, or returns ctx's error when ctx is
// done first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release gives permits back: they are available again at once, and the
// grants that held them no longer count, so they are never credited twice.
// The most recent grants are released first. Permits beyond those held are
// ignored: a limiter never holds more than its rate. Release is not
// idempotent: a call resent after a lost reply releases twice. On a quota
// (WithQuota), it takes permits off the current period's count, down to 0
// at most.
func (l *Limiter) Release(ctx context.Context, permits int64) error {
	if err := l.checkPermits(permits); err != nil {
		return err
	}
	defer l.forget()
	if l.quota != nil {
		if _, err := l.quotaCall(ctx, "release", permits); err != nil {
			return fmt.Errorf("core: release: %w", err)
		}
		return nil
	}
	if _, err := l.eval(ctx, scriptRelease, l.scriptRate(), permits); err != nil {
		return fmt.Errorf("core: release: %w", err)
	}
	return nil
}

// Refund gives back the permits of grant, which an acquire on this limiter
// returned in its Result, and reports whether it did: only that grant
// leaves the log, whatever was granted after it, so its permits are
// available again at once and never credited twice. A grant that has left
// the window, was refunded or settled before, or is zero changes nothing
// (false), so a Refund resent after a lost reply refunds once. Permits
// taken back by a refund can be granted again within the window: grants in
// a window may then exceed the rate, as with Release.
//
// A refund that Redis cannot take now (it fails, answers too late, or this
// process is too busy to send it: the error says which) is kept by the
// Client and made later (see Charge), within the grant's window. So is the
// refund of a grant whose acquire got no decision (its Result had an
// error): it waits until that acquire's script, should it run late, has
// run, or follows the grant's Charge; it reports false and no error. So
// does a refund of a grant on which the Client still owes Redis a change
// (one it could not make yet, or writes into a promoted master): it
// follows that change.
//
// On a quota (WithQuota), the permits go back to the count of the grant's
// period, if it is still current; the count never goes below 0.
func (l *Limiter) Refund(ctx context.Context, grant Grant) (bool, error) {
	return l.settle(ctx, grant, 0, "refund")
}

// Charge records grants made without Redis, such as a local fallback's
// while Redis could not decide: each is one that a failed TryAcquire
// returned in its Result, with the permits it asked for. The Client writes
// each into the limiter's log at its Time (the time of its call, by the
// local clock turned into Redis's with the offset measured on the Client's
// decisions until then), as the grant it stands for: the window it falls in counts it, whatever
// Redis granted meanwhile, past the rate if need be. A window over its rate
// is a debt that later acquires pay by waiting: they are denied, with the
// exact retry time, until the window is back under the rate;
// Result.Remaining and AvailablePermits report 0 meanwhile.
//
// Charge does no I/O. What the Client owes Redis (charges, and refunds and
// settles it could not make) goes with the limiter's next call, first, in
// its round trip, or, for a limiter with no call, from a goroutine of the
// Client's within moments (while Redis fails, once a second, as its
// probe). A grant already in the log (the script of its acquire ran after
// all) counts once, at its own time if the script ran later; a grant whose
// window has passed changes nothing. A Client keeps at most 100 000 such
// changes, the oldest going first. A Redisson client sharing the limiter
// sees a debt as a negative number of available permits: it is denied
// until the debt is paid.
//
// On a quota (WithQuota), a grant counts in the period of its time, by
// Redis's clock, if that period is still current when the Client writes
// it, and once if the counter remembers it (see the package
// documentation, Quotas).
func (l *Limiter) Charge(grants ...Grant) {
	if l.err != nil {
		return
	}
	now := time.Now().UnixMilli()
	for _, g := range grants {
		if !g.isZero() && l.owns(g) {
			l.c.owed.owe(l, &op{member: g.member.String(), at: g.at, period: g.period, due: now, expires: l.expiry(g)})
		}
	}
}

// owns reports whether g may be a grant of the limiter's kind, a rate's
// or a quota's: another kind's changes nothing.
func (l *Limiter) owns(g Grant) bool {
	return (l.quota != nil) == (g.member.n == quotaMemberLen)
}

// Settle settles grant, which an acquire on this limiter returned, to its
// real cost of permits, once the work it paid for is done and its size
// known (the tokens of a completion, the bytes of an export), and reports
// whether it did. The grant keeps its time and holds permits from then on:
// fewer than it took gives back the difference (0 gives back all of it, as
// Refund), more charges the difference, even when that takes the window
// past its rate: the work is done, so the overage is a debt that later
// acquires pay by waiting (see Charge). A grant is settled once: settling
// it again, or after Refund, or after its window passed, changes nothing
// and reports false, so a Settle resent after a lost reply settles once.
// A settle that Redis cannot take now is kept and made later, as a refund
// is (see Refund). On a quota (WithQuota), the difference changes the
// count of the grant's period, if it is still current: past the limit, a
// debt that refuses every acquire until the period ends.
func (l *Limiter) Settle(ctx context.Context, grant Grant, permits int64) (bool, error) {
	if permits < 0 || permits > MaxPermits {
		return false, fmt.Errorf("%w: %d not in [0, %d]", ErrInvalidPermits, permits, int64(MaxPermits))
	}
	return l.settle(ctx, grant, permits, "settle")
}

// settle puts grant's member, settled to permits, in place of grant's in
// the log, now or, when Redis cannot take it, does not know the grant yet,
// or the Client owes a change of it still, later (see Refund).
func (l *Limiter) settle(ctx context.Context, grant Grant, permits int64, what string) (bool, error) {
	switch {
	case l.err != nil:
		return false, l.err
	case grant.isZero() || !l.owns(grant):
		return false, nil
	}
	defer l.forget()
	if permits == 0 {
		l.c.recent.forget(grant)
	}
	o := l.settleOp(grant, permits)
	switch {
	case grant.state == grantLost:
		l.oweLate(o, grant)
		return false, nil
	case grant.state == grantUnsent, // known to Redis only once charged: after its charge
		l.c.owed.holds(l, o.old): // after what is owed on it (a grant written again into a promoted master, see recent)
		l.c.owed.owe(l, o)
		return false, nil
	}
	var changed bool
	var err error
	if l.quota != nil {
		changed, err = l.quotaChange(ctx, o)
	} else {
		var v []int64
		v, err = l.eval(ctx, scriptCharge, l.scriptRate(), o.member, "", o.old)
		changed = err == nil && v[1] == 1
	}
	if err != nil {
		if unanswered(err) {
			l.c.owed.owe(l, o)
		}
		return false, fmt.Errorf("core: %s: %w", what, err)
	}
	return changed, nil
}

// settleOp returns the change that settles grant at permits (0: a refund).
// Of a quota's grant, the script reads only the permits of member.
func (l *Limiter) settleOp(grant Grant, permits int64) *op {
	return &op{member: settledMember(grant.member, permits), old: grant.member.String(), at: grant.at, period: grant.period,
		due: time.Now().UnixMilli(), expires: l.expiry(grant)}
}

// oweLate makes o, a change of grant, whose acquire got no answer, after
// that acquire's script, should it run late.
func (l *Limiter) oweLate(o *op, grant Grant) {
	delay := lateScripts
	if iv := l.interval(); iv > 0 {
		delay = min(delay, iv/2)
	}
	// Its script ran before its round trip's deadline or not at all, and
	// Redis read it within a grace: a round trip that waited in this
	// process (for a connection of the pool, say) until long after its
	// caller left is given back too.
	o.due = max(o.due+delay.Milliseconds(), grant.sendBy+roundTripGrace.Milliseconds())
	l.c.owed.owe(l, o)
}

// interval returns the limiter's window when its rate is given in code,
// else 0.
func (l *Limiter) interval() time.Duration {
	if l.coded != nil {
		return l.coded.rate.Interval
	}
	return 0
}

// expiry returns when grant leaves its window (of a quota: when its period
// ends), by the local clock, in unix ms, or 0 when the limiter's window is
// not known here.
func (l *Limiter) expiry(grant Grant) int64 {
	if l.quota != nil {
		return l.quotaExpiry(grant)
	}
	if l.coded == nil {
		return 0
	}
	return grant.at + l.coded.rate.Interval.Milliseconds() - l.c.offset.Load()
}

// Peek returns what TryAcquire of permits would answer now, taking
// nothing and writing nothing: whether they are available, the permits
// left, and when they would not be, the time until they are (never early,
// as TryAcquire's); its Rate is the rate (or quota) that decides. Of a
// quota, the times are those until the next period. Another client may
// take or give back permits the moment after.
func (l *Limiter) Peek(ctx context.Context, permits int64) (Result, error) {
	if l.err != nil {
		return Result{}, l.err
	}
	if permits < 1 || permits > MaxPermits {
		return Result{}, fmt.Errorf("%w: %d not in [1, %d]", ErrInvalidPermits, permits, int64(MaxPermits))
	}
	if l.quota != nil {
		q, err := l.quotaCall(ctx, "peek")
		if err != nil {
			return Result{}, fmt.Errorf("core: peek: %w", err)
		}
		r := Result{Remaining: q.v[2], Rate: Rate{Permits: l.quota.quota.Limit, Interval: time.Duration(q.end-q.start) * time.Millisecond}}
		r.ResetAfter = time.Duration(q.end-q.v[1]) * time.Millisecond
		r.Allowed = permits <= r.Remaining
		if !r.Allowed {
			r.RetryAfter = r.ResetAfter
		}
		return r, nil
	}
	v, err := l.eval(ctx, scriptAvailable, l.scriptRate(), permits)
	switch {
	case err != nil:
		return Result{}, fmt.Errorf("core: peek: %w", err)
	case len(v) < 7:
		return Result{}, fmt.Errorf("core: peek: %w", errShortReply)
	case v[2] == -1:
		return Result{}, fmt.Errorf("core: peek: %w: %d permits, rate %d", ErrPermitsExceedRate, permits, v[4])
	}
	r := Result{Allowed: v[2] == 0, Remaining: v[1], ResetAfter: time.Duration(v[3]) * time.Millisecond,
		Rate: Rate{Permits: v[4], Interval: time.Duration(v[5]) * time.Millisecond, Type: RateType(v[6])}}
	if retry := v[2]; retry < -1 {
		r.RetryAfter, r.bound = time.Duration(-2-retry)*time.Millisecond, true
	} else {
		r.RetryAfter = time.Duration(retry) * time.Millisecond
	}
	if l.coded != nil {
		r.Rate = l.coded.rate
	}
	return r, nil
}

// AvailablePermits returns the number of permits available now. It writes
// nothing. A limiter with a WithRate rate and no state in Redis is full.
// Of a quota (WithQuota), it is what the current period has left.
func (l *Limiter) AvailablePermits(ctx context.Context) (int64, error) {
	if l.err != nil {
		return 0, l.err
	}
	if l.quota != nil {
		q, err := l.quotaCall(ctx, "peek")
		if err != nil {
			return 0, fmt.Errorf("core: available permits: %w", err)
		}
		return q.v[2], nil
	}
	v, err := l.eval(ctx, scriptAvailable, l.scriptRate())
	if err != nil {
		return 0, fmt.Errorf("core: available permits: %w", err)
	}
	return v[1], nil
}

// Expire sets a TTL on all of the limiter's keys (for PerClient, this
// Client's own) and reports whether any key exists. A limiter with a
// KeepAlive renews it on its next grant.
func (l *Limiter) Expire(ctx context.Context, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond || ttl%time.Millisecond != 0 {
		return false, fmt.Errorf("%w: ttl %v is not a whole number of milliseconds >= 1ms", ErrInvalidDuration, ttl)
	}
	return l.expire(ctx, ttl.Milliseconds())
}

// ClearExpire removes the TTL of all of the limiter's keys and reports
// whether any key had one. A limiter with a KeepAlive sets it again on its
// next grant. The keys of a limiter with WithRate always expire: on one,
// ClearExpire sets their TTL back to the rate's KeepAlive. A quota's
// counter (WithQuota) always expires too: ClearExpire sets its TTL back to
// a minute past the end of the current period, and reports whether it
// exists.
func (l *Limiter) ClearExpire(ctx context.Context) (bool, error) {
	if l.quota != nil && l.err == nil {
		q, err := l.quotaCall(ctx, "ttl")
		if err != nil {
			return false, fmt.Errorf("core: expire: %w", err)
		}
		return q.v[2] == 1, nil
	}
	if l.coded != nil {
		return l.expire(ctx, l.coded.rate.KeepAlive.Milliseconds())
	}
	return l.expire(ctx, 0)
}

func (l *Limiter) expire(ctx context.Context, ms int64) (bool, error) {
	if l.err != nil {
		return false, l.err
	}
	v, err := l.eval(ctx, scriptExpire, nil, ms)
	if err != nil {
		return false, fmt.Errorf("core: expire: %w", err)
	}
	return v[1] == 1, nil
}

// Delete removes the limiter's config and state (for PerClient, this
// Client's state; other clients' expire on their own) and reports whether
// anything was deleted.
func (l *Limiter) Delete(ctx context.Context) (bool, error) {
	if l.err != nil {
		return false, l.err
	}
	defer l.forget()
	v, err := l.eval(ctx, scriptDelete, nil)
	if err != nil {
		return false, fmt.Errorf("core: delete: %w", err)
	}
	return v[1] > 0, nil
}

// eval runs script s on the limiter's keys with rate (nil for a script
// that takes none) and args, and returns its reply once its status is OK.
func (l *Limiter) eval(ctx context.Context, s *script, rate *rateArgs, args ...any) ([]int64, error) {
	if rate != nil {
		args = append(rate.appendTo(make([]any, 0, 4+len(args))), args...)
	}
	cl := &call{ctx: ctx, l: l, s: s, args: args}
	if _, err := l.c.do(ctx, cl); err != nil {
		return nil, err
	}
	if cl.err != nil {
		return nil, cl.err
	}
	if err := replyError(cl.reply); err != nil {
		return nil, err
	}
	if len(cl.reply) < 2 {
		return nil, fmt.Errorf("core: unexpected %s reply of %d values", s.name, len(cl.reply))
	}
	return cl.reply, nil
}

// scriptRate returns the rate that the limiter's decisions pass to the
// scripts: the one given in code, or noRate.
func (l *Limiter) scriptRate() *rateArgs {
	if l.coded != nil {
		return l.coded.args
	}
	return &noRate
}

// callContext returns ctx bounded by the limiter's call timeout
// (WithCallTimeout), unless ctx ends first anyway.
func (l *Limiter) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, noCancel
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= l.timeout {
		return ctx, noCancel // ctx ends first anyway
	}
	return context.WithTimeout(ctx, l.timeout)
}

func noCancel() {}

// check validates the limiter and a rate argument before any I/O. A
// quota's limiter has no rate.
func (l *Limiter) check(r Rate) error {
	switch {
	case l.err != nil:
		return l.err
	case l.quota != nil:
		return l.noRate()
	}
	return r.Validate()
}

// noRate is the error of a rate's call on a quota's limiter.
func (l *Limiter) noRate() error {
	return fmt.Errorf("%w: limiter %q counts a quota (WithQuota): it has no rate", ErrInvalidOption, l.name)
}

// checkPermits validates the limiter and a permit count before any I/O.
func (l *Limiter) checkPermits(n int64) error {
	switch {
	case l.err != nil:
		return l.err
	case n < 1 || n > MaxPermits:
		return fmt.Errorf("%w: %d not in [1, %d]", ErrInvalidPermits, n, int64(MaxPermits))
	case l.coded != nil && n > l.coded.rate.Permits:
		return fmt.Errorf("%w: %d permits, rate %d", ErrPermitsExceedRate, n, l.coded.rate.Permits)
	case l.quota != nil && n > l.quota.quota.Limit:
		return fmt.Errorf("%w: %d permits, quota %d per %v", ErrPermitsExceedRate, n, l.quota.quota.Limit, l.quota.quota.Period)
	}
	return nil
}
