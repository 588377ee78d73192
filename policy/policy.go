package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/reqlimits"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
)

// Policy is one named limit on requests: a rate (New), a number of
// requests in flight (NewConcurrency) or a quota per calendar period
// (NewQuota); who is limited, how many requests, at what cost, whether
// they wait, what happens when Redis cannot decide, which headers they
// carry and who observes it. It knows nothing of any framework: adapters
// apply it. A Policy is safe for concurrent use by multiple goroutines.
type Policy struct {
	client   *core.Client
	kind     kind
	name     string
	prefix   string // the escaped name and ':'
	key      keyfunc.KeyFunc
	missing  missingKey
	ipKey    keyfunc.KeyFunc // the client IP, for a request with no key
	cost     int64
	costFunc CostFunc
	rateFunc RateFunc
	base     *prepared  // the rate given to New
	quota    core.Quota // a quota's, given to NewQuota
	rates    rates      // the rates rateFunc chose
	timeout  time.Duration
	failure  failure
	shares   int64     // instances sharing the rate, for the local fallback
	fallback *fallback // the local limiter
	waits    *waits    // nil unless wait mode
	refund   func(status int) bool
	dryRun   bool
	observer observe.Observer
	logger   *slog.Logger // nil: slog.Default()
	style    headerStyle
	lease    time.Duration // concurrency: a slot's lease
	held     *holders      // concurrency: the slots this process holds
	ov       *overrides    // the per-key limits an operator set

	errLog    throttle
	refundLog throttle
}

// maxNameLen is the longest policy name.
const maxNameLen = 64

// kind is the kind of limit a policy applies.
type kind uint8

const (
	kindRate        kind = iota // a rate: New
	kindConcurrency             // requests in flight: NewConcurrency
	kindQuota                   // a quota per calendar period: NewQuota
)

// New returns the Policy called name that limits requests to rate r on
// client c. The name is the limit's identity in Redis, in headers and in
// metrics: policies of one name on one Client share one budget, and must
// have the same kind, limit and missing-key choice. A name is 1 to 64
// printable ASCII characters. New does no I/O. An invalid rate, name or
// option (or one that does not fit a rate, such as WithLease) gives an
// error naming it and wrapping core.ErrInvalidRate,
// core.ErrInvalidPermits or core.ErrInvalidOption.
func New(c *core.Client, name string, r core.Rate, opts ...Option) (*Policy, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("policy %q: rate %v: %w", name, r, err)
	}
	return newPolicy(c, name, kindRate, r, core.Quota{}, opts)
}

// newPolicy returns the policy of kind k called name, of rate r (for a
// concurrency limit, r.Permits is the limit; for a quota, q, whose limit
// r.Permits is), with opts.
func newPolicy(c *core.Client, name string, k kind, r core.Rate, q core.Quota, opts []Option) (*Policy, error) {
	s := defaults()
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if c == nil {
		return nil, fmt.Errorf("policy %q: %w: nil *core.Client", name, core.ErrInvalidOption)
	}
	if !validName(name) {
		return nil, fmt.Errorf("policy %q: %w: a name is 1 to %d printable ASCII characters", name, core.ErrInvalidOption, maxNameLen)
	}
	if err := s.validate(k, r); err != nil {
		return nil, fmt.Errorf("policy %q: %w", name, err)
	}
	ov, err := register(c, name, use{kind: k, rate: r, quota: quotaOf(k, q), missing: s.missing})
	if err != nil {
		return nil, err
	}
	key := keyfunc.IP()
	switch {
	case len(s.keys) == 1:
		key = s.keys[0]
	case len(s.keys) > 1:
		key = keyfunc.Join(s.keys...)
	}
	p := &Policy{
		client:   c,
		kind:     k,
		name:     name,
		prefix:   keyfunc.Escape(name) + ":",
		key:      key,
		missing:  s.missing,
		ipKey:    keyfunc.IP(s.missingIP...),
		cost:     s.cost,
		costFunc: s.costFunc,
		rateFunc: s.rateFunc,
		timeout:  s.timeout,
		failure:  s.failure,
		shares:   int64(s.instances),
		refund:   s.refund,
		dryRun:   s.dryRun,
		observer: s.observer,
		logger:   s.logger,
		style:    s.headers,
		lease:    s.lease,
		ov:       ov,
		quota:    q,
	}
	p.base = p.prepare(r)
	p.fallback = newFallback(fallbackKeys)
	switch k {
	case kindConcurrency:
		p.held = newHolders()
	case kindQuota:
		p.fallback.quotas = newQuotaShares(fallbackKeys)
	}
	if s.maxWait > 0 {
		p.waits = newWaits(s.maxWait, s.maxWaiters, s.maxPerKey)
	}
	return p, nil
}

// MustNew is like New but panics with New's error: for policies built
// once, at start, from constants.
func MustNew(c *core.Client, name string, r core.Rate, opts ...Option) *Policy {
	p, err := New(c, name, r, opts...)
	if err != nil {
		panic(err)
	}
	return p
}

func validName(name string) bool {
	ok := len(name) >= 1 && len(name) <= maxNameLen
	for i := 0; ok && i < len(name); i++ {
		ok = name[i] >= 0x20 && name[i] <= 0x7e
	}
	return ok
}

// Decision is what a Policy did with one request.
type Decision struct {
	// Policy is the name of the policy that decided.
	Policy string
	// Outcome is what the request got, as observers see it.
	Outcome observe.Outcome
	// Status is the status of the response that refuses the request, or
	// 0 to serve it: 429 over the limit, 413 for a cost above the rate,
	// 400 for a cost that cannot be read, 403 for a request without a key
	// under WithMissingKeyDeny, and 503 when Redis cannot decide under
	// WithFailClosed.
	Status int
	// Body is Status's problem+json body (ProblemContentType). It is
	// shared: do not modify it.
	Body []byte
	// Result is the limiter's answer, or the local fallback's when Redis
	// could not decide.
	Result core.Result
	// Err is what the adapter reports to its error handler, or logs with
	// LogError: why Redis could not decide (when it fails, under fail open
	// or closed; when it answered too late, under fail closed; under every
	// failure policy when the error is not Redis failing, such as a key of
	// another type under the limiter's name), or why a key, rate or cost
	// function failed. The request is decided all the same, by the rules
	// that Status follows. Err never reaches a response.
	Err error

	p        *Policy
	limits   *reqlimits.Limits
	name     string        // the limiter's name, without the key prefix
	limiter  *core.Limiter // the limiter decided on
	slot     *slot         // the slot the request holds, of a concurrency limit
	prep     *prepared     // the rate and headers used
	cost     int64
	redisErr error // why Redis did not decide, also under fail local
}

// Decide decides the request of x: it finds the request's key, rate and
// cost, takes the cost from the limiter in one round trip (waiting for a
// permit in wait mode), applies the failure policy instead of blocking
// when Redis cannot answer in time, writes the rate limit fields to the
// response header, and reports the decision to the observer.
//
// An adapter answers a Decision whose Status is not 0 with that status and
// Body (or with its deny handler, for a 429); otherwise it serves the
// request and calls Done. It reports Err, when not nil, to its error
// handler. When several policies limit one request, they share what they
// must through the request's context: the later ones that do not wait
// decide without Redis once a round trip got no answer in time, and the
// earlier ones give their grants back when a later one refuses.
func (p *Policy) Decide(x Exchange) (d Decision) {
	var start time.Time
	if p.observer != nil {
		start = time.Now()
	}
	lim := limitsOf(x)
	p.decide(x, lim, &d)
	p.writeHeaders(x, lim, &d, headline(lim, &d))
	if d.Status != 0 {
		lim.Refused = true
	}
	if p.observer != nil {
		p.observe(&d, time.Since(start))
	}
	return d
}

// overloadRetry is how long a waiting request sleeps before it asks again
// when its call was busy (see acquire).
const overloadRetry = 10 * time.Millisecond

// decide makes d, zero, p's decision of the request x, whose limits are
// lim. It fills in d in place, the limiter's answer (d.Result) included (as
// decideSlot, withoutRedis and local do): a Decision or a Result passed by
// value at each step made the decision's stack frames larger than the
// first stack of a gRPC server's goroutine, new for each call, which the
// runtime then copied to one twice as large.
func (p *Policy) decide(x Exchange, lim *reqlimits.Limits, d *Decision) {
	d.Policy, d.p, d.limits = p.name, p, lim // d is zero
	name, ok := p.limiterName(x, d)
	if !ok {
		return
	}
	d.prep = p.rateOf(x, name, d)
	if !p.costOf(x, d) {
		return
	}
	d.name = name
	ctx, cancel := p.callContext(x.Context(), lim)
	defer cancel()
	if p.kind == kindConcurrency {
		p.decideSlot(ctx, x.Context(), d)
		return
	}
	l := p.client.Limiter(name, d.prep.limOpts...)
	d.limiter = l
	waited, err := p.acquire(ctx, l, d.cost, 0, &d.Result)
	if err == nil && !d.Result.Allowed && p.waits != nil {
		var w bool
		w, err = p.waits.wait(x.Context(), p, l, name, d.cost, &d.Result)
		waited = waited || w
	}
	if err != nil {
		p.undecided(d, l, err)
		return
	}
	if p.kind == kindQuota {
		p.fallback.quotas.note(name, d.Result, p.shares, time.Now())
	}
	d.decided(waited)
}

// undecided decides d, whose call on l Redis did not decide (err), its
// result in d.Result: as the denial that the core's cache gave, if it gave
// one, else without Redis.
func (p *Policy) undecided(d *Decision, l *core.Limiter, err error) {
	var c claim
	switch {
	case d.Result.Cached:
		p.stillDenied(d, err)
		return
	case p.kind == kindQuota:
		c = quotaClaim{l, d.Result}
	default:
		c = rateClaim{l, d.Result.Grant}
	}
	d.Result = core.Result{}
	p.withoutRedis(d, c, err)
}

// callContext returns the context of the round trip that decides the
// request whose context is ctx, and whose limits are lim: one that its
// client going away does not end (Go's server reports a client that only
// closes its sending side so too), so that Redis decides every request it
// answers in time, and a call it answered is never taken for one it did
// not (which would be decided in memory, over the limit); bounded by the
// request's own deadline, and, once a round trip of the request got no
// answer in time, for a limit that does not wait, by that one's, so that
// the request is answered within one timeout. A wait ends with the
// request's context, its client gone.
func (p *Policy) callContext(ctx context.Context, lim *reqlimits.Limits) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if lim.Lost && p.waits == nil && (!ok || lim.LostAt.Before(dl)) {
		dl, ok = lim.LostAt, true
	}
	if ok && time.Until(dl) < p.timeout {
		return context.WithDeadline(lim.Detached(), dl)
	}
	return lim.Detached(), noCancel
}

func noCancel() {}

// decided makes d the decision of Redis's answer, d.Result, which the
// request waited for or not.
func (d *Decision) decided(waited bool) {
	switch {
	case d.Result.Allowed && waited:
		d.Outcome = observe.WaitedAllowed
	case d.Result.Allowed:
		d.Outcome = observe.Allowed
	case d.p.dryRun:
		d.Outcome = observe.DryRunDenied
	default:
		d.refuse(observe.Denied, http.StatusTooManyRequests, d.prep.headers.deny)
	}
}

// acquire takes cost permits from l, within maxWait (0: no wait), into r,
// and reports whether it asked more than once. A call this process was too
// busy for (not sent, or answered too late: busy) is asked again in wait
// mode, after overloadRetry and then twice as long each time, up to a
// second, so that a process too busy for its calls does not add more; the
// last time at the end of the wait, so that the request is answered within
// the wait and one decision. A late grant of such a call is given back
// (core.Limiter.Refund waits until its script, should it run late, has
// run).
func (p *Policy) acquire(ctx context.Context, l *core.Limiter, cost int64, maxWait time.Duration, r *core.Result) (bool, error) {
	var start time.Time // read only by a call that waits or asks again
	if maxWait > 0 || p.waits != nil {
		start = time.Now()
	}
	for tries := 0; ; tries++ {
		var err error
		if maxWait > 0 {
			*r, err = l.TryAcquireWithin(ctx, cost, maxWait-time.Since(start))
		} else {
			*r, err = l.TryAcquire(ctx, cost)
		}
		if !busy(err) || p.waits == nil || time.Since(start)+overloadRetry >= p.waits.maxWait {
			return tries > 0, err
		}
		if lost(err) {
			_, _ = l.Refund(ctx, r.Grant)
		}
		left := p.waits.maxWait - time.Since(start)
		select {
		case <-time.After(min(overloadRetry<<min(tries, 7), time.Second, left)):
		case <-ctx.Done():
			return tries > 0, err
		}
	}
}

// busy reports whether err says that this process was too busy for a
// call: it was not sent (core.ErrOverloaded), or its answer came too late
// for it (lost).
func busy(err error) bool { return errors.Is(err, core.ErrOverloaded) || lost(err) }

// lost reports whether err says that a call was sent and got no answer in
// time, though Redis did not fail (core.ErrUnavailable): its script may
// yet run, late.
func lost(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, core.ErrOverloaded) &&
		!errors.Is(err, core.ErrUnavailable)
}

// refuse makes d a refusal with status and body.
func (d *Decision) refuse(o observe.Outcome, status int, body []byte) {
	d.Outcome, d.Status, d.Body = o, status, body
}

// report adds err, about what part of the request failed, to d.Err.
func (p *Policy) report(d *Decision, what string, err error) {
	d.Err = errors.Join(d.Err, fmt.Errorf("policy %s: %s: %w", p.name, what, err))
}

// limiterName returns the name of the request's limiter: the escaped policy
// name, ':' and the escaped key; for a request without a key (its key
// function found none, or failed) under WithMissingKeyIP, "::ip:" and the
// escaped client address. It returns false when the missing-key rule
// decided the request instead.
func (p *Policy) limiterName(x Exchange, d *Decision) (string, bool) {
	key, err := p.key(x)
	if err == nil && key != "" {
		return p.prefix + keyfunc.Escape(key), true
	}
	if err != nil && !errors.Is(err, keyfunc.ErrNoKey) {
		p.report(d, "key", err)
	}
	switch p.missing {
	case missingDeny:
		d.refuse(observe.ErrorRejected, http.StatusForbidden, p.base.headers.reject)
		return "", false
	case missingServe:
		d.Outcome = observe.ErrorServed
		return "", false
	}
	ip, err := p.ipKey(x)
	if err != nil {
		// No address either: such requests share one limiter, rather
		// than go unlimited.
		p.report(d, "client address", err)
		return p.prefix + ":ip", true
	}
	return p.prefix + ":ip:" + keyfunc.Escape(ip), true
}

// rateOf returns the request's limit, prepared: the key's override (on
// the limiter name), else the rate function's rate, else the policy's own,
// also when the rate function fails.
func (p *Policy) rateOf(x Exchange, name string, d *Decision) *prepared {
	if prep := p.override(name); prep != nil {
		return prep
	}
	if p.rateFunc == nil {
		return p.base
	}
	r, err := p.rateFunc(x)
	if err == nil {
		var prep *prepared
		if prep, err = p.rates.get(p, r); err == nil {
			return prep
		}
	}
	p.report(d, "rate (limited at the policy's own rate)", err)
	return p.base
}

// costOf sets the request's cost in d, and returns false when the cost
// refuses the request: 400 when it cannot be read or is below 1, 413 when
// it is above the rate.
func (p *Policy) costOf(x Exchange, d *Decision) bool {
	d.cost = p.cost
	if p.costFunc != nil {
		c, err := p.costFunc(x)
		if err == nil && c < 1 {
			err = fmt.Errorf("%w: cost %d", core.ErrInvalidPermits, c)
		}
		if err != nil {
			p.report(d, "cost", err)
			d.refuse(observe.ErrorRejected, http.StatusBadRequest, d.prep.headers.badCost)
			return false
		}
		d.cost = c
	}
	if d.cost > d.prep.rate.Permits {
		d.refuse(observe.Denied, http.StatusRequestEntityTooLarge, d.prep.headers.tooCostly)
		return false
	}
	return true
}

// A claim is what a decision asked Redis for: a rate's grant on its
// limiter, or a slot's lease on its semaphore.
type claim interface {
	// local decides d in memory, at the policy's share, and keeps what it
	// grants so that Redis counts it once it answers.
	local(d *Decision) core.Result
	// undo gives back what a call that got no answer in time may yet take,
	// so that a late grant does not count.
	undo(ctx context.Context)
}

// rateClaim is a rate's claim: grant g on limiter l.
type rateClaim struct {
	l *core.Limiter
	g core.Grant
}

// local takes the request's cost from the fallback at the process's share
// of the rate; a grant, made under g, is charged to the core, which writes
// it into Redis's log once Redis answers.
func (c rateClaim) local(d *Decision) core.Result {
	r := d.p.fallback.take(d.name, d.prep.share, d.cost, c.g)
	if r.Allowed {
		r.Grant = c.g
		c.l.Charge(c.g)
	}
	return r
}

func (c rateClaim) undo(ctx context.Context) { _, _ = c.l.Refund(ctx, c.g) }

// stillDenied makes d the denial in d.Result that Redis made of the
// request's client before, which the core's denial cache gave for a call
// that Redis did not answer (err): the client stays denied until its retry
// time, whatever the failure mode, and the request's later limits have what
// is left of this one's time, as after any call that got no answer in time.
func (p *Policy) stillDenied(d *Decision, err error) {
	p.noteRedisErr(d, err)
	if errors.Is(err, core.ErrUnavailable) && p.failure == failLocal {
		p.fallback.failed(p, err)
	}
	d.decided(false)
}

// noteRedisErr notes err, of a call that Redis did not decide, in d: when
// the call got no answer in time, the request's later limits have what is
// left of its time.
func (p *Policy) noteRedisErr(d *Decision, err error) {
	if lost(err) {
		d.limits.Lost, d.limits.LostAt = true, time.Now()
	}
	d.redisErr = fmt.Errorf("policy %s: %w", p.name, err)
}

// withoutRedis decides d when Redis did not (err), on what the call asked,
// c: by the failure policy when Redis fails (core.ErrUnavailable); in
// memory, at the process's share, when this process was too busy to get its
// call answered in time (but under fail open or closed, a call never sent
// is shed with a 429, and under fail closed one answered too late gets its
// 503), and when the limiter's keys in Redis hold what no limiter writes, or
// any other error, which is reported: only a failing Redis under fail open
// serves a request without a decision.
func (p *Policy) withoutRedis(d *Decision, c claim, err error) {
	overload, lost, failing := errors.Is(err, core.ErrOverloaded), lost(err), errors.Is(err, core.ErrUnavailable)
	p.noteRedisErr(d, err)
	switch {
	case failing && p.failure == failLocal:
		p.fallback.failed(p, err)
	case failing && p.failure == failOpen:
		d.Err = errors.Join(d.Err, d.redisErr)
		d.Outcome = observe.ErrorServed
		return
	case failing || lost && p.failure == failClosed:
		d.Err = errors.Join(d.Err, d.redisErr)
		d.refuse(observe.ErrorRejected, http.StatusServiceUnavailable, d.prep.headers.unavailable)
		if lost {
			c.undo(context.WithoutCancel(d.limits))
		}
		return
	case overload && p.failure != failLocal:
		d.Result = core.Result{Rate: d.prep.rate, RetryAfter: ceilTimeout(p.timeout)}
		if q, ok := c.(quotaClaim); ok {
			d.Result.Rate = q.asked.Rate // the quota of the current period
		}
		d.refuse(observe.Shed, http.StatusTooManyRequests, d.prep.headers.deny)
		return
	case !overload && !lost && !errors.Is(err, context.Canceled):
		// Not Redis failing, nor this process: the limiter's keys, say.
		d.Err = errors.Join(d.Err, d.redisErr)
	}
	p.local(d, c, lost)
}

// local decides d in memory, at the policy's share on this process (see
// claim); a refusal of a call whose script may yet run (sent, with no
// answer in time: lost) gives back what it asked, so that a late grant
// does not count.
func (p *Policy) local(d *Decision, c claim, lost bool) {
	// A copy for the claim, whose method the compiler cannot see into:
	// d itself would then be moved to the heap on every decision.
	dc := *d
	r := c.local(&dc)
	*d = dc
	switch {
	case r.Allowed:
		d.Outcome = observe.FallbackAllowed
	case p.dryRun:
		d.Outcome = observe.DryRunDenied
	default:
		d.refuse(observe.FallbackDenied, http.StatusTooManyRequests, d.prep.headers.deny)
	}
	if !r.Allowed && lost {
		c.undo(context.WithoutCancel(d.limits))
	}
	d.Result = r
}

// ceilTimeout is the Retry-After of a shed request: the decision timeout,
// in whole seconds rounded up.
func ceilTimeout(d time.Duration) time.Duration {
	return time.Duration(ceilSeconds(d, 1)) * time.Second
}

// Done is called by the adapter once the next handler has answered a
// request that d served, with the response status, also when the handler
// panicked (as a 500), and once its response is over: when the handler
// handed its connection over (a WebSocket), once that is closed. A
// concurrency limit's slot is given back then, whatever the status (for a
// request whose round trip to Redis got no answer in time, by the slot's
// timer, at once: the request does not wait a second timeout for it). A
// rate's or a quota's grant is given back when a later policy of the
// request refused it, or when the policy's refund rule (WithRefund)
// matches the status: exactly that grant, before the adapter returns (a
// rate's grant that the fallback made, to the fallback too);
// otherwise it is settled to the cost the handler reported with Settle,
// if any. A refund or settle that Redis cannot take now is kept by the
// core and made when Redis answers, within the grant's window (of a
// quota: while its period is current).
func (d Decision) Done(status int) {
	p := d.p
	if d.slot != nil {
		d.slot.release(d.limits)
		return
	}
	if p == nil || d.Result.Grant == (core.Grant{}) {
		return
	}
	refund := d.limits.Refused || p.refund != nil && p.refund(status)
	permits, settle := int64(0), refund
	if !refund {
		permits, settle = d.limits.Settled(p)
	}
	if !settle {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.limits), p.timeout)
	defer cancel()
	what := "refund"
	var err error
	if refund {
		if d.Outcome == observe.FallbackAllowed && p.kind != kindQuota {
			p.fallback.giveBack(d.name, d.prep.share, d.cost, d.Result.Grant)
		}
		_, err = d.limiter.Refund(ctx, d.Result.Grant)
	} else {
		what = "settle"
		_, err = d.limiter.Settle(ctx, d.Result.Grant, permits)
	}
	// Logged unless this process was merely busy (not sent, or answered
	// late): that is no news of Redis.
	if err != nil && !busy(err) {
		if ok, n := p.refundLog.allow(); ok {
			p.log().WarnContext(ctx, "rate limiter: "+what+" failed; it is made when Redis answers", "policy", p.name,
				"err", err, "similar_errors_not_logged", n)
		}
	}
}

// Settle reports the real cost of the request whose context is ctx, as
// this policy counts it, once its handler knows it: the tokens a completion
// used, the bytes an export wrote. When the request is done, the
// middleware settles the grant the request took to it (core's
// Limiter.Settle), once: fewer permits than the request reserved give the
// difference back, more charge the difference, even past the rate (a debt
// that the client's next requests pay by waiting). A request the policy
// gives back (a refund rule, a later limit's refusal) is not settled. A
// request whose handler reports nothing keeps its reservation; a second
// report replaces the first. The headers were sent before the handler ran:
// they show the reservation, not the settlement.
//
// Settle may be called from any goroutine while the request runs. It does
// nothing for a request this policy did not limit. A count below 0 or above
// core.MaxPermits is an error wrapping core.ErrInvalidPermits, and changes
// nothing.
func (p *Policy) Settle(ctx context.Context, permits int64) error {
	if permits < 0 || permits > core.MaxPermits {
		return fmt.Errorf("policy %s: Settle(%d): %w: permits must be in [0, %d]", p.name, permits, core.ErrInvalidPermits, int64(core.MaxPermits))
	}
	if lim, ok := reqlimits.From(ctx); ok {
		lim.Settle(p, permits)
	}
	return nil
}

// observe reports d to the observer.
func (p *Policy) observe(d *Decision, latency time.Duration) {
	p.observer.Decision(d.limits, observe.Decision{
		Policy: p.name, Outcome: d.Outcome, Permits: d.cost, Latency: latency,
		Remaining: max(d.Result.Remaining, 0), RetryAfter: d.Result.RetryAfter,
		Err: cmp.Or(d.Err, d.redisErr), RedisFailed: d.redisErr != nil,
	})
}

// throttle lets one log line through per second.
type throttle struct {
	last       atomic.Int64 // unix nanos of the last line
	suppressed atomic.Int64 // lines left out since
}

// allow reports whether to log now, and how many lines were left out.
func (t *throttle) allow() (bool, int64) {
	now := time.Now().UnixNano()
	last := t.last.Load()
	if now-last < int64(time.Second) || !t.last.CompareAndSwap(last, now) {
		t.suppressed.Add(1)
		return false, 0
	}
	return true, t.suppressed.Swap(0)
}

// log returns the policy's logger.
func (p *Policy) log() *slog.Logger {
	if p.logger != nil {
		return p.logger
	}
	return slog.Default()
}

// LogError is what adapters do with a Decision's Err when they have no
// error handler: it logs err with the policy's logger (WithLogger) at
// level WARN, at most once a second per policy, counting the errors it leaves out, so that a Redis
// outage cannot flood the log.
func (p *Policy) LogError(ctx context.Context, err error) {
	if ok, n := p.errLog.allow(); ok {
		p.log().WarnContext(ctx, "rate limiter error", "policy", p.name, "err", err, "similar_errors_not_logged", n)
	}
}
