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
)

// Policy is one named rate limit applied to requests. It is safe for
// concurrent use by multiple goroutines.
type Policy struct {
	client     *core.Client
	name       string
	prefix     string // the escaped name and ':'
	key        keyfunc.KeyFunc
	missing    missingKey
	fallback   keyfunc.KeyFunc // the client IP, for a request with no key
	cost       int64
	maxWait    time.Duration
	waiters    chan struct{}
	limOpts    []core.LimiterOption
	failClosed bool
	headers    header

	log throttle
}

// Outcome is the kind of a Decision.
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
)

// Decision is the outcome of a Policy for one request.
type Decision struct {
	Outcome Outcome
	// Result is the limiter's answer when Allowed or Denied.
	Result core.Result
	// Err says why the decision Failed, or why the request has no key
	// (Rejected, Unlimited). It never reaches a response.
	Err error
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
	return &Policy{
		client:     c,
		name:       name,
		prefix:     keyfunc.Escape(name) + ":",
		key:        key,
		missing:    s.missing,
		fallback:   keyfunc.IP(s.missingIP...),
		cost:       s.cost,
		maxWait:    s.maxWait,
		waiters:    make(chan struct{}, s.maxWaiters),
		limOpts:    []core.LimiterOption{core.WithRate(r), core.WithCallTimeout(s.timeout)},
		failClosed: s.failClosed,
		headers:    newHeader(name, r, s.headers),
	}, nil
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

// Decide decides one request: it finds the request's limiter, acquires the
// policy's cost on it, waits for a permit in wait mode, and reports a
// failure instead of blocking when Redis cannot answer in time.
func (p *Policy) Decide(req keyfunc.Request) Decision {
	name, d, ok := p.limiterName(req)
	if !ok {
		return d
	}
	l := p.client.Limiter(name, p.limOpts...)
	ctx := req.Context()
	r, err := l.TryAcquire(ctx, p.cost)
	if err != nil {
		return p.failed(err)
	}
	if !r.Allowed && p.fits(ctx, r.RetryAfter) {
		select {
		case p.waiters <- struct{}{}:
			w, err := l.TryAcquireWithin(ctx, p.cost, p.maxWait)
			<-p.waiters
			switch {
			case ctx.Err() != nil: // the client went away: keep the denial
			case err != nil:
				return p.failed(err)
			default:
				r = w
			}
		default: // too many waiters: reject at once
		}
	}
	if r.Allowed {
		return Decision{Outcome: Allowed, Result: r}
	}
	return Decision{Outcome: Denied, Result: r}
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
	ip, err := p.fallback(req)
	if err != nil {
		return "", p.failed(err), false
	}
	return p.prefix + ":ip:" + keyfunc.Escape(ip), Decision{}, true
}

// fits reports whether a wait of d fits in the maximum wait and in what is
// left of ctx's deadline.
func (p *Policy) fits(ctx context.Context, d time.Duration) bool {
	if d > p.maxWait {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || d <= time.Until(dl)
}

func (p *Policy) failed(err error) Decision {
	return Decision{Outcome: Failed, Err: fmt.Errorf("policy %s: %w", p.name, err)}
}

// Reply returns the response to a request the policy does not serve: 429
// when Denied, 403 when Rejected, 503 when Failed and the policy fails
// closed, each with its problem+json body (ProblemContentType). For a
// request to serve, the status is 0. The body is shared: do not modify
// it.
func (p *Policy) Reply(d Decision) (status int, body []byte) {
	switch {
	case d.Outcome == Denied:
		return http.StatusTooManyRequests, p.headers.deny
	case d.Outcome == Rejected:
		return http.StatusForbidden, p.headers.reject
	case d.Outcome == Failed && p.failClosed:
		return http.StatusServiceUnavailable, p.headers.unavailable
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
	if p.failClosed {
		outcome = "rejected with 503 (fail closed)"
	}
	slog.WarnContext(ctx, "rate limiter: no decision", "policy", p.name, "err", err,
		"request", outcome, "similar_errors_not_logged", n)
}
