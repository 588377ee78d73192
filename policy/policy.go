package policy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// Policy is one named rate limit applied to requests. It is safe for
// concurrent use by multiple goroutines.
type Policy struct {
	client     *core.Client
	rate       core.Rate
	name       string
	prefix     []byte // escaped name and ':'
	key        keyfunc.KeyFunc
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
	// Denied: the request is over the limit.
	Denied
	// Failed: no decision (Redis down or slow, no key for the request):
	// the failure policy applies.
	Failed
)

// Decision is the outcome of a Policy for one request.
type Decision struct {
	Outcome Outcome
	// Result is the limiter's answer when Allowed or Denied.
	Result core.Result
	// Err says why the decision Failed. It never reaches a response.
	Err error
}

// New returns the Policy for rate with settings s. It does no I/O. Invalid
// settings give an error wrapping core.ErrInvalidRate, core.ErrInvalidPermits,
// core.ErrPermitsExceedRate or core.ErrInvalidOption.
func New(c *core.Client, r core.Rate, s Settings) (*Policy, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", core.ErrInvalidOption)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if s.Name == "" {
		s.Name = DefaultName
	}
	if s.Cost == 0 {
		s.Cost = 1
	}
	if s.MaxWaiters == 0 {
		s.MaxWaiters = DefaultMaxWaiters
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	switch {
	case s.Cost < 1 || s.Cost > r.Permits:
		return nil, fmt.Errorf("%w: cost %d not in [1, %d]", core.ErrInvalidPermits, s.Cost, r.Permits)
	case s.MaxWait < 0 || s.MaxWaiters < 0 || s.Timeout < 0:
		return nil, fmt.Errorf("%w: negative wait, waiters or timeout", core.ErrInvalidOption)
	case s.Headers < HeadersAll || s.Headers > HeadersNone:
		return nil, fmt.Errorf("%w: unknown header style %d", core.ErrInvalidOption, s.Headers)
	}
	for _, k := range s.Keys {
		if k == nil {
			return nil, fmt.Errorf("%w: nil key function", core.ErrInvalidOption)
		}
	}
	h, err := newHeader(s.Name, r, s.Headers)
	if err != nil {
		return nil, err
	}
	key := keyfunc.IP()
	switch len(s.Keys) {
	case 0:
	case 1:
		key = s.Keys[0]
	default:
		key = keyfunc.Join(s.Keys...)
	}
	p := &Policy{
		client:     c,
		rate:       r,
		name:       s.Name,
		prefix:     append(keyfunc.AppendEscaped(nil, s.Name), ':'),
		key:        key,
		cost:       s.Cost,
		maxWait:    s.MaxWait,
		waiters:    make(chan struct{}, s.MaxWaiters),
		limOpts:    []core.LimiterOption{core.WithRate(r), core.WithCallTimeout(s.Timeout)},
		failClosed: s.FailClosed,
		headers:    h,
	}
	return p, nil
}

// Name returns the policy's name.
func (p *Policy) Name() string { return p.name }

// Rate returns the policy's rate.
func (p *Policy) Rate() core.Rate { return p.rate }

// FailClosed reports whether failed decisions are answered with 503.
func (p *Policy) FailClosed() bool { return p.failClosed }

var names = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// appendName appends the limiter name of req to dst: the escaped policy
// name, ':' and the request's key parts.
func (p *Policy) appendName(req keyfunc.Request, dst []byte) ([]byte, error) {
	b, err := p.key(req, append(dst, p.prefix...))
	if err != nil {
		return dst, fmt.Errorf("policy %s: %w", p.name, err)
	}
	return b, nil
}

// LimiterName returns the limiter name of req: the escaped policy name,
// ':' and the request's key parts. The error wraps keyfunc.ErrNoKey when
// the request has no key.
func (p *Policy) LimiterName(req keyfunc.Request) (string, error) {
	b, err := p.appendName(req, nil)
	return string(b), err
}

// Decide decides one request: it acquires the policy's cost on the
// request's limiter, waits for a permit in wait mode, and reports a
// failure instead of blocking when Redis cannot answer in time.
func (p *Policy) Decide(req keyfunc.Request) Decision {
	bp := names.Get().(*[]byte)
	b, err := p.appendName(req, (*bp)[:0])
	if err != nil {
		names.Put(bp)
		return Decision{Outcome: Failed, Err: err}
	}
	// core.Limiter copies the name into the limiter's own memory, so the
	// name can be a view of the pooled buffer, which goes back at once.
	l := p.client.Limiter(unsafe.String(unsafe.SliceData(b), len(b)), p.limOpts...)
	*bp = b[:0]
	names.Put(bp)
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

// invalid throttles the errors of policies that could not be built.
var invalid throttle

// LogError is the default error handler of every adapter: it logs err with
// log/slog at level WARN, at most once a second per policy, counting the
// errors it leaves out, so a Redis outage cannot flood the log. On a nil
// Policy (New failed: the adapter answers 500) it logs the configuration
// error.
func (p *Policy) LogError(ctx context.Context, err error) {
	if p == nil {
		if ok, n := invalid.allow(); ok {
			slog.ErrorContext(ctx, "rate limiter: invalid options, answering 500", "err", err, "similar_errors_not_logged", n)
		}
		return
	}
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
