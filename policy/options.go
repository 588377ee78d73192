package policy

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
)

// An Option configures a Policy.
type Option func(*settings)

// A RateFunc chooses the rate of a request, such as its user's plan (see
// WithRateFunc).
type RateFunc func(keyfunc.Request) (core.Rate, error)

// A CostFunc chooses the permits a request takes, such as a batch's item
// count (see WithCostFunc).
type CostFunc func(keyfunc.Request) (int64, error)

// settings are a Policy's options, defaults first.
type settings struct {
	keys       []keyfunc.KeyFunc
	keySet     bool
	cost       int64
	costFunc   CostFunc
	rateFunc   RateFunc
	maxWait    time.Duration
	maxWaiters int
	maxPerKey  int
	timeout    time.Duration
	failure    failure
	instances  int
	headers    headerStyle
	missing    missingKey
	missingIP  []keyfunc.IPOption
	refund     func(status int) bool
	dryRun     bool
	observer   observe.Observer
	logger     *slog.Logger
	lease      time.Duration // 0: not set
}

// Defaults of a Policy's options.
const (
	defaultTimeout          = 100 * time.Millisecond
	defaultMaxWaiters       = 1024
	defaultMaxWaitersPerKey = 32
	defaultLease            = 30 * time.Second
	minLease                = time.Second
	// fallbackKeys bounds the keys the local fallback keeps in memory per
	// policy, the least recently used going first: about 185 bytes each,
	// 18.5 MB in all (TestFallbackKeysAreBounded).
	fallbackKeys = 100_000
)

func defaults() settings {
	return settings{cost: 1, maxWaiters: defaultMaxWaiters, maxPerKey: defaultMaxWaitersPerKey,
		timeout: defaultTimeout, failure: failLocal, instances: 1}
}

// validate checks the options against a policy of kind k and rate r (for
// a concurrency limit or a quota, r.Permits is the limit), and sets the
// lease of a concurrency limit that has none.
func (s *settings) validate(k kind, r core.Rate) error {
	unit := "rate's"
	switch k {
	case kindConcurrency:
		unit = "concurrency limit's"
	case kindQuota:
		unit = "quota's"
	}
	switch {
	case s.cost < 1 || s.cost > r.Permits:
		return fmt.Errorf("WithCost(%d): %w: the cost must be from 1 to the %s %d permits", s.cost, core.ErrInvalidPermits, unit, r.Permits)
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
	switch k {
	case kindRate:
		if s.lease != 0 {
			return fmt.Errorf("WithLease(%v): %w: a rate holds no slot; a lease is for a concurrency limit", s.lease, core.ErrInvalidOption)
		}
		return nil
	case kindQuota:
		switch {
		case s.rateFunc != nil:
			return fmt.Errorf("WithRateFunc: %w: a rate function chooses a rate's permits, not a quota's; "+
				"give each plan a quota policy of its own", core.ErrInvalidOption)
		case s.lease != 0:
			return fmt.Errorf("WithLease(%v): %w: a quota holds no slot; a lease is for a concurrency limit", s.lease, core.ErrInvalidOption)
		}
		return nil
	}
	switch {
	case s.rateFunc != nil:
		return fmt.Errorf("WithRateFunc: %w: a rate function chooses a rate's permits, not a concurrency limit", core.ErrInvalidOption)
	case s.refund != nil:
		return fmt.Errorf("WithRefund: %w: a concurrency limit gives every slot back when its request ends", core.ErrInvalidOption)
	case s.lease == 0:
		s.lease = defaultLease
	case s.lease < minLease || s.lease%time.Millisecond != 0:
		return fmt.Errorf("WithLease(%v): %w: a lease is a whole number of milliseconds, at least %v", s.lease, core.ErrInvalidOption, minLease)
	}
	return nil
}

// failure is what a policy does when Redis cannot decide.
type failure uint8

const (
	failLocal failure = iota
	failOpen
	failClosed
)

// missingKey is what a policy does with a request that has no key.
type missingKey uint8

const (
	missingIP missingKey = iota
	missingDeny
	missingServe
)

func (m missingKey) String() string {
	switch m {
	case missingDeny:
		return "WithMissingKeyDeny()"
	case missingServe:
		return "WithMissingKeyServe()"
	}
	return "WithMissingKeyIP()"
}

// WithKey sets the key functions that say who is limited; several are
// joined into one key with keyfunc.Join. The default is the client IP,
// keyfunc.IP().
func WithKey(keys ...keyfunc.KeyFunc) Option {
	keys = append([]keyfunc.KeyFunc(nil), keys...)
	return func(s *settings) { s.keys, s.keySet = keys, true }
}

// WithCost sets the permits each request takes, from 1 to the rate's
// permits. The default is 1.
func WithCost(permits int64) Option {
	return func(s *settings) { s.cost = permits }
}

// WithCostFunc chooses the permits each request takes, such as a batch's
// item count. A cost that f cannot give (an error) or that is below 1 is
// the client's mistake: the request is answered 400 with a problem+json
// body, and the error is reported. A cost above the rate can never be
// granted: the request is answered 413.
func WithCostFunc(f CostFunc) Option {
	return func(s *settings) { s.costFunc = f }
}

// WithRateFunc chooses the permits of each request's rate, such as its
// user's plan: the rate it returns must have the interval and type of the
// rate given to New (a limiter has one window; another window is another
// policy). When f fails or returns an invalid rate, or one of another
// interval or type, the request is limited at the rate given to New, and
// the error is reported. The limiter name does not change with the rate: a
// user who moves from one plan to another keeps one budget, its rate
// updated in place with its history, the grants of the window counting
// against the new permits; to give each plan a budget of its own, put the
// plan in the key. The headers show the rate used. Each distinct rate is
// validated and prepared once; at most 256 are kept, and further ones are
// prepared for each request. It is an error for a concurrency limit or a
// quota.
func WithRateFunc(f RateFunc) Option {
	return func(s *settings) { s.rateFunc = f }
}

// WithLease sets how long a concurrency limit's slot is held for when
// nothing renews it: a request renews its slot's lease every third of it
// while it runs, and gives the slot back when it ends, so the lease is how
// long a process that died (or lost Redis) keeps the slots of its requests.
// At least 1 s; the default is 30 s. Leases end by Redis's clock. It is an
// error for a rate or a quota.
func WithLease(d time.Duration) Option {
	return func(s *settings) { s.lease = d }
}

// WithRefund gives back the permits of a request whose response status
// matches: its own grant, exactly, before the middleware returns. Counting
// only failed logins is WithRefundSuccessful. A refund that fails (Redis
// down) is logged.
func WithRefund(refund func(status int) bool) Option {
	return func(s *settings) { s.refund = refund }
}

// WithRefundFailed gives back the permits of requests answered 400 or
// above: only successful requests count (fiber's SkipFailedRequests).
func WithRefundFailed() Option {
	return WithRefund(func(status int) bool { return status >= 400 })
}

// WithRefundSuccessful gives back the permits of requests answered below
// 400: only failed requests count, such as failed logins (fiber's
// SkipSuccessfulRequests).
func WithRefundSuccessful() Option {
	return WithRefund(func(status int) bool { return status < 400 })
}

// WithWait turns on wait mode: a request over the limit waits for a permit
// up to maxWait, when the exact wait fits in it and in the request's own
// deadline, instead of being rejected at once. The default, 0, never waits.
func WithWait(maxWait time.Duration) Option {
	return func(s *settings) { s.maxWait = maxWait }
}

// WithMaxWaiters bounds the requests waiting at once in wait mode; beyond
// it they are rejected at once. The default is 1024.
func WithMaxWaiters(n int) Option {
	return func(s *settings) { s.maxWaiters = n }
}

// WithMaxWaitersPerKey bounds the requests waiting at once on one key (one
// client, say) in wait mode, so that one client cannot take every wait
// slot. The default is 32.
func WithMaxWaitersPerKey(n int) Option {
	return func(s *settings) { s.maxPerKey = n }
}

// WithTimeout bounds each Redis round trip of a decision. The default is
// 100 ms.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) { s.timeout = d }
}

// WithFailLocal is the default failure policy: while Redis cannot decide (a
// round trip failed or timed out), each process limits each key in memory
// at the rate divided by instances (rounded up, at least 1 permit), with the
// same keys, headers and 429s, so that a slow or unreachable Redis limits
// each process to its share instead of serving everyone. Give the number
// of processes that share the limit. Requests Redis denied before the
// outage stay denied until their retry time. The fallback keeps at most
// 100 000 keys per policy in memory, the least recently used going first.
// A quota's share is of what its period has left (see NewQuota).
func WithFailLocal(instances int) Option {
	return func(s *settings) { s.failure, s.instances = failLocal, instances }
}

// WithFailOpen serves requests while Redis fails (core.ErrUnavailable),
// and reports the error: an outage turns limiting off. A busy process does
// not: a call this process could not get answered in time is decided in
// memory at its share of the rate, and one it never sent is shed with a
// 429. An error that is not Redis failing (a key of another type under the
// limiter's name) is decided in memory too.
func WithFailOpen() Option {
	return func(s *settings) { s.failure = failOpen }
}

// WithFailClosed answers 503, with Retry-After: 1, to requests that Redis
// cannot decide, because it fails or answered too late, and reports the
// error. A call this process never sent is shed with a 429, and an error
// that is not Redis failing (a key of another type under the limiter's
// name) is decided in memory at the process's share.
func WithFailClosed() Option {
	return func(s *settings) { s.failure = failClosed }
}

// WithDryRun decides every request as usual (so budgets and metrics are
// real) but serves them all: a request over the limit gets the rate limit
// fields the header options select, never Retry-After, and the observer
// sees a dry-run denial.
func WithDryRun() Option {
	return func(s *settings) { s.dryRun = true }
}

// WithObserver reports each decision, and each change of the local
// fallback, to o (package observe; metrics/prometheus and metrics/otel
// implement it). Without one, nothing is measured.
func WithObserver(o observe.Observer) Option {
	return func(s *settings) { s.observer = o }
}

// WithLogger sends the policy's log lines (the local fallback's start and
// end, errors without an error handler, refunds that failed) to l instead
// of the default logger, slog.Default(). Lines are WARN but for the end of
// the fallback (INFO), and at most one a second of each kind.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) { s.logger = l }
}

// WithIETFHeaders writes only the IETF draft RateLimit and
// RateLimit-Policy fields. The default writes them and the X-RateLimit-*
// headers.
func WithIETFHeaders() Option {
	return func(s *settings) { s.headers = headersIETF }
}

// WithLegacyHeaders writes only X-RateLimit-Limit, -Remaining and -Reset.
func WithLegacyHeaders() Option {
	return func(s *settings) { s.headers = headersLegacy }
}

// WithoutHeaders writes no rate limit headers; a refusal still carries
// Retry-After.
func WithoutHeaders() Option {
	return func(s *settings) { s.headers = headersNone }
}

// WithMissingKeyIP limits a request that has no key (its key function
// found no user, API key or route, or failed) by its client IP,
// keyfunc.IP(opts...), in a namespace of its own: the limiter
// "<name>::ip:<address>", apart from every key. This is the default, with
// the TCP peer as the address; behind a proxy, pass keyfunc.TrustProxies,
// or all requests without a key share the proxy's budget.
func WithMissingKeyIP(opts ...keyfunc.IPOption) Option {
	opts = append([]keyfunc.IPOption(nil), opts...)
	return func(s *settings) { s.missing, s.missingIP = missingIP, opts }
}

// WithMissingKeyDeny rejects a request that has no key with 403 and a
// problem+json body.
func WithMissingKeyDeny() Option {
	return func(s *settings) { s.missing = missingDeny }
}

// WithMissingKeyServe serves a request that has no key without limiting
// it.
func WithMissingKeyServe() Option {
	return func(s *settings) { s.missing = missingServe }
}
