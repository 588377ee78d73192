package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
)

// Policy is one named rate limit applied to requests. It is safe for
// concurrent use by multiple goroutines.
type Policy struct {
	client   *core.Client
	name     string
	prefix   string // the escaped name and ':'
	key      keyfunc.KeyFunc
	missing  missingKey
	ipKey    keyfunc.KeyFunc // the client IP, for a request with no key
	cost     int64
	costFunc func(keyfunc.Request) (int64, error)
	rateFunc func(keyfunc.Request) (core.Rate, error)
	base     *prepared // the rate given to New
	rates    rates     // the rates rateFunc chose
	timeout  time.Duration
	failure  failure
	shares   int64 // instances sharing the rate, for the local fallback
	fallback *fallback
	waits    *waits // nil unless wait mode
	refund   func(status int) bool
	dryRun   bool
	dryHdrs  bool
	observer observe.Observer
	style    headerStyle

	log       throttle
	refundLog throttle
}

// Outcome is what an adapter does with a request.
type Outcome uint8

const (
	// Allowed: serve the request.
	Allowed Outcome = iota
	// Denied: the request is over the limit: answer 429.
	Denied
	// Failed: no decision (Redis down or slow, a key function failed):
	// pass Err to the error handler, then serve the request, or answer
	// 503 when the policy fails closed.
	Failed
	// Rejected: the request has no key, and the policy rejects such
	// requests (WithMissingKeyDeny): answer 403.
	Rejected
	// Unlimited: the request has no key, and the policy serves such
	// requests without a limit (WithMissingKeyServe): serve it.
	Unlimited
	// TooCostly: the request's cost is above the rate, so it can never be
	// granted: answer 413.
	TooCostly
)

// Decision is the outcome of a Policy for one request.
type Decision struct {
	Outcome Outcome
	// Result is the limiter's answer when Allowed or Denied (or the local
	// fallback's, when Redis could not decide).
	Result core.Result
	// Err says why the decision Failed, or why the request has no key
	// (Rejected, Unlimited), or what kept Redis from deciding when the
	// local fallback did. It never reaches a response.
	Err error

	observed observe.Outcome
	lim      *core.Limiter // the limiter decided on: for a refund
	prep     *prepared     // the rate and headers used
	cost     int64
	waited   bool
	skipped  bool // Redis was not asked (fallback, or an earlier policy's failed round trip)
}

// RedisFailed reports whether a round trip to Redis failed or timed out in
// this decision. An adapter tells the request's later policies (Decide's
// redisFailed), which then decide without waiting for Redis again: a
// request with several limits answers within one timeout.
func (d Decision) RedisFailed() bool {
	return d.Err != nil && !d.skipped && d.lim != nil && !errors.Is(d.Err, core.ErrOverloaded)
}

// Refused reports whether the policy refuses the request (a 429, 403, 413
// or 503: Reply's status is not 0). An adapter tells the request's earlier
// policies (Done's refusedLater), which give their grants back: a request
// refused by one limit takes nothing from the others.
func (p *Policy) Refused(d Decision) bool {
	status, _ := p.Reply(d)
	return status != 0
}

// New returns the Policy limiting requests to rate r on client c. It does
// no I/O. An invalid rate or option gives an error naming it, and wrapping
// core.ErrInvalidRate, core.ErrInvalidPermits or core.ErrInvalidOption:
// adapters panic with it, since it is a mistake in the program.
func New(c *core.Client, r core.Rate, opts ...Option) (*Policy, error) {
	s := defaults()
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if c == nil {
		return nil, fmt.Errorf("%w: nil *core.Client", core.ErrInvalidOption)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("rate %v: %w", r, err)
	}
	if err := s.validate(r); err != nil {
		return nil, err
	}
	key := keyfunc.IP()
	switch {
	case len(s.keys) == 1:
		key = s.keys[0]
	case len(s.keys) > 1:
		key = keyfunc.Join(s.keys...)
	}
	name, err := register(c, r, &s, key)
	if err != nil {
		return nil, err
	}
	p := &Policy{
		client:   c,
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
		dryHdrs:  s.dryRunHeaders,
		observer: s.observer,
		style:    s.headers,
	}
	p.base = p.prepare(r)
	if s.failure == failLocal {
		p.fallback = newFallback(s.fallbackKeys)
	}
	if s.maxWait > 0 {
		p.waits = newWaits(s.maxWait, s.maxWaiters, s.maxPerKey)
	}
	return p, nil
}

// maxNameLen is the longest policy name.
const maxNameLen = 64

// validate checks the options that do not depend on other middlewares.
func (s *settings) validate(r core.Rate) error {
	switch {
	case s.cost < 1 || s.cost > r.Permits:
		return fmt.Errorf("WithCost(%d): %w: the cost must be from 1 to the rate's %d permits", s.cost, core.ErrInvalidPermits, r.Permits)
	case s.maxWait < 0:
		return fmt.Errorf("WithWait(%v): %w: a negative wait", s.maxWait, core.ErrInvalidOption)
	case s.maxWaiters < 1:
		return fmt.Errorf("WithMaxWaiters(%d): %w: at least one request must be able to wait", s.maxWaiters, core.ErrInvalidOption)
	case s.maxPerKey < 1:
		return fmt.Errorf("WithMaxWaitersPerKey(%d): %w: at least one request must be able to wait", s.maxPerKey, core.ErrInvalidOption)
	case s.instances < 1:
		return fmt.Errorf("WithFailLocal(%d): %w: at least one instance", s.instances, core.ErrInvalidOption)
	case s.timeout <= 0:
		return fmt.Errorf("WithTimeout(%v): %w: the timeout must be positive", s.timeout, core.ErrInvalidOption)
	case s.keySet && len(s.keys) == 0:
		return fmt.Errorf("WithKey(): %w: no key function", core.ErrInvalidOption)
	}
	for i, k := range s.keys {
		if k == nil {
			return fmt.Errorf("WithKey: %w: key function %d of %d is nil", core.ErrInvalidOption, i+1, len(s.keys))
		}
	}
	if s.named {
		ok := len(s.name) >= 1 && len(s.name) <= maxNameLen
		for i := 0; ok && i < len(s.name); i++ {
			ok = s.name[i] >= 0x20 && s.name[i] <= 0x7e
		}
		if !ok {
			return fmt.Errorf("WithName(%q): %w: a name is 1 to %d printable ASCII characters", s.name, core.ErrInvalidOption, maxNameLen)
		}
	}
	return nil
}

// Name returns the policy's name: the one given with WithName, or the one
// it was given after its rate.
func (p *Policy) Name() string { return p.name }

// errEmptyKey is the error of a key function that returned "".
var errEmptyKey = fmt.Errorf("%w: the key function returned an empty key", keyfunc.ErrNoKey)

// errSkipped is why Redis was not asked: an earlier policy's round trip on
// the same request failed.
var errSkipped = errors.New("redis not asked: an earlier limit's round trip of this request failed")

// errFallback is why Redis was not asked while the local fallback decides.
var errFallback = errors.New("redis not asked: the local fallback decides while redis cannot")

// Decide decides one request: it finds the request's limiter, rate and
// cost, acquires the cost on the limiter, waits for a permit in wait mode,
// and applies the failure policy instead of blocking when Redis cannot
// answer in time. redisFailed says that an earlier policy's round trip on
// the same request failed (Decision.RedisFailed): this one then decides
// without asking Redis.
func (p *Policy) Decide(req keyfunc.Request, redisFailed bool) Decision {
	if p.observer == nil {
		return p.decide(req, redisFailed)
	}
	start := time.Now()
	d := p.decide(req, redisFailed)
	p.observe(d, time.Since(start))
	return d
}

func (p *Policy) decide(req keyfunc.Request, redisFailed bool) Decision {
	name, d, ok := p.limiterName(req)
	if !ok {
		return d
	}
	prep, cost, d, ok := p.rateAndCost(req)
	if !ok {
		return d
	}
	l := p.client.Limiter(name, prep.limOpts...)
	d = Decision{lim: l, prep: prep, cost: cost}
	if redisFailed {
		return p.withoutRedis(d, name, errSkipped, true)
	}
	if p.fallback != nil && p.fallback.deciding(p) {
		return p.withoutRedis(d, name, errFallback, true)
	}
	ctx := req.Context()
	r, err := l.TryAcquire(ctx, cost)
	if err != nil {
		return p.withoutRedis(d, name, err, false)
	}
	if p.fallback != nil {
		p.fallback.redisBack(p)
	}
	if !r.Allowed && p.waits != nil {
		var werr error
		r, d.waited, werr = p.waits.wait(ctx, l, name, cost, r)
		if werr != nil {
			return p.withoutRedis(d, name, werr, false)
		}
	}
	d.Result = r
	switch {
	case r.Allowed && d.waited:
		d.Outcome, d.observed = Allowed, observe.WaitedAllowed
	case r.Allowed:
		d.Outcome, d.observed = Allowed, observe.Allowed
	case p.dryRun:
		d.Outcome, d.observed = Allowed, observe.DryRunDenied
	default:
		d.Outcome, d.observed = Denied, observe.Denied
	}
	return d
}

// withoutRedis decides d when Redis could not (err), or was not asked
// (skipped): by the failure policy. Local overload (core.ErrOverloaded) is
// no Redis failure: the local fallback decides it, or, under fail open or
// closed, the request is shed with a 429 rather than served unlimited.
func (p *Policy) withoutRedis(d Decision, name string, err error, skipped bool) Decision {
	d.skipped = skipped
	overload := errors.Is(err, core.ErrOverloaded)
	d.Err = fmt.Errorf("policy %s: %w", p.name, err)
	switch {
	case p.failure == failLocal:
		if !overload && !skipped {
			p.fallback.start(p, err)
		}
		return p.local(d, name)
	case overload:
		d.Outcome, d.observed = Denied, observe.Shed
		d.Result = core.Result{Rate: d.prep.rate, RetryAfter: ceilTimeout(p.timeout)}
	case p.failure == failClosed:
		d.Outcome, d.observed = Failed, observe.ErrorRejected
	default:
		d.Outcome, d.observed = Failed, observe.ErrorServed
	}
	return d
}

// local decides d in memory: a denial Redis made before stands (the core's
// denial cache), else the policy's share of the rate on this process.
func (p *Policy) local(d Decision, name string) Decision {
	r, ok := d.lim.CachedDenial(d.cost)
	if !ok {
		r = p.fallback.take(name, d.prep.share, d.cost)
	}
	d.Result = r
	switch {
	case r.Allowed:
		d.Outcome, d.observed = Allowed, observe.FallbackAllowed
	case p.dryRun:
		d.Outcome, d.observed = Allowed, observe.DryRunDenied
	default:
		d.Outcome, d.observed = Denied, observe.FallbackDenied
	}
	return d
}

// ceilTimeout is the Retry-After of a shed request: the decision timeout,
// in whole seconds rounded up.
func ceilTimeout(d time.Duration) time.Duration {
	return time.Duration(ceilSeconds(d, 1)) * time.Second
}

// rateAndCost returns the rate and the cost of req, or, when it has none
// to decide with, its decision.
func (p *Policy) rateAndCost(req keyfunc.Request) (*prepared, int64, Decision, bool) {
	prep, cost := p.base, p.cost
	if p.rateFunc != nil {
		r, err := p.rateFunc(req)
		if err == nil {
			prep, err = p.rates.get(p, r)
		}
		if err != nil {
			return nil, 0, p.failed(fmt.Errorf("rate: %w", err)), false
		}
	}
	if p.costFunc != nil {
		c, err := p.costFunc(req)
		if err == nil && c < 1 {
			err = fmt.Errorf("%w: cost %d", core.ErrInvalidPermits, c)
		}
		if err != nil {
			return nil, 0, p.failed(fmt.Errorf("cost: %w", err)), false
		}
		cost = c
	}
	if cost > prep.rate.Permits {
		return nil, 0, Decision{Outcome: TooCostly, observed: observe.Denied, prep: prep, cost: cost,
			Err: fmt.Errorf("policy %s: %w: cost %d, rate %d", p.name, core.ErrPermitsExceedRate, cost, prep.rate.Permits)}, false
	}
	return prep, cost, Decision{}, true
}

// Done is called by an adapter once the next handler has answered a
// request that d served, with the response status, and whether a policy
// after this one refused the request (Refused). It gives back d's grant
// when the later refusal or the policy's refund rule (WithRefund) says so:
// exactly that grant, before the adapter returns. A refund that fails is
// logged, not retried.
func (p *Policy) Done(ctx context.Context, d Decision, status int, refusedLater bool) {
	if d.lim == nil || d.Result.Grant.IsZero() || d.skipped {
		return
	}
	if !refusedLater && (p.refund == nil || !p.refund(status)) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	if _, err := d.lim.Refund(ctx, d.Result.Grant); err != nil {
		if ok, n := p.refundLog.allow(); ok {
			slog.WarnContext(ctx, "rate limiter: refund failed; the permits stay taken", "policy", p.name,
				"err", err, "similar_errors_not_logged", n)
		}
	}
}

// observe reports d to the observer.
func (p *Policy) observe(d Decision, latency time.Duration) {
	o := observe.Decision{
		Policy: p.name, Outcome: d.observed, Permits: d.cost, Latency: latency,
		Remaining: max(d.Result.Remaining, 0), RetryAfter: d.Result.RetryAfter,
	}
	if d.lim != nil {
		o.Err = d.Err // a Redis error (or overload); key errors are not
	}
	switch d.Outcome {
	case Rejected:
		o.Outcome = observe.ErrorRejected
	case Unlimited:
		o.Outcome = observe.ErrorServed
	case Failed:
		if d.lim == nil { // a key function or rate function failed
			o.Outcome = observe.ErrorServed
			if p.failure == failClosed {
				o.Outcome = observe.ErrorRejected
			}
		}
	}
	p.observer.Decision(o)
}

// limiterName returns the name of the request's limiter: the escaped
// policy name, ':' and the escaped key; or, for a request with no key
// under WithMissingKeyIP, "::ip:" and the escaped client address. When
// there is no limiter to ask, it returns the decision instead.
func (p *Policy) limiterName(req keyfunc.Request) (string, Decision, bool) {
	key, err := p.key(req)
	if err == nil && key != "" {
		return p.prefix + keyfunc.Escape(key), Decision{}, true
	}
	if err == nil {
		err = errEmptyKey
	}
	if !errors.Is(err, keyfunc.ErrNoKey) {
		return "", p.failed(err), false
	}
	switch p.missing {
	case missingDeny:
		return "", Decision{Outcome: Rejected, Err: err}, false
	case missingServe:
		return "", Decision{Outcome: Unlimited, Err: err}, false
	}
	ip, err := p.ipKey(req)
	if err != nil {
		return "", p.failed(err), false
	}
	return p.prefix + ":ip:" + keyfunc.Escape(ip), Decision{}, true
}

func (p *Policy) failed(err error) Decision {
	d := Decision{Outcome: Failed, Err: fmt.Errorf("policy %s: %w", p.name, err), observed: observe.ErrorServed}
	if p.failure == failClosed {
		d.observed = observe.ErrorRejected
	}
	return d
}

// Reply returns the response to a request the policy does not serve: 429
// when Denied, 403 when Rejected, 413 when TooCostly, 503 when Failed and
// the policy fails closed, each with its problem+json body
// (ProblemContentType). For a request to serve, the status is 0. The body
// is shared: do not modify it.
func (p *Policy) Reply(d Decision) (status int, body []byte) {
	h := p.headersOf(d)
	switch {
	case d.Outcome == Denied:
		return http.StatusTooManyRequests, h.deny
	case d.Outcome == Rejected:
		return http.StatusForbidden, h.reject
	case d.Outcome == TooCostly:
		return http.StatusRequestEntityTooLarge, h.tooCostly
	case d.Outcome == Failed && p.failure == failClosed:
		return http.StatusServiceUnavailable, h.unavailable
	}
	return 0, nil
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

// LogError is the default error handler of every adapter: it logs the
// error of a failed decision with log/slog at level WARN, at most once a
// second per policy, counting the errors it leaves out, so a Redis outage
// cannot flood the log.
func (p *Policy) LogError(ctx context.Context, err error) {
	ok, n := p.log.allow()
	if !ok {
		return
	}
	outcome := "served (fail open)"
	if p.failure == failClosed {
		outcome = "rejected with 503 (fail closed)"
	}
	slog.WarnContext(ctx, "rate limiter: no decision", "policy", p.name, "err", err,
		"request", outcome, "similar_errors_not_logged", n)
}
