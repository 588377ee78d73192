package policy

import (
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
)

// Defaults of a Policy.
const (
	DefaultTimeout          = 100 * time.Millisecond
	DefaultMaxWaiters       = 1024
	DefaultMaxWaitersPerKey = 32
	// DefaultFallbackKeys bounds the keys the local fallback keeps in
	// memory per policy, the least recently used going first: about 256
	// bytes each, 25 MB in all.
	DefaultFallbackKeys = 100_000
)

// An Option configures a Policy. Adapters wrap each one in an option of
// their own type, under the same name.
type Option func(*settings)

// settings are a Policy's options, defaults first.
type settings struct {
	name          string
	named         bool
	keys          []keyfunc.KeyFunc
	keySet        bool
	cost          int64
	costFunc      func(keyfunc.Request) (int64, error)
	rateFunc      func(keyfunc.Request) (core.Rate, error)
	maxWait       time.Duration
	maxWaiters    int
	maxPerKey     int
	timeout       time.Duration
	failure       failure
	instances     int
	fallbackKeys  int
	headers       headerStyle
	missing       missingKey
	missingIP     []keyfunc.IPOption
	refund        func(status int) bool
	dryRun        bool
	dryRunHeaders bool
	observer      observe.Observer
}

func defaults() settings {
	return settings{cost: 1, maxWaiters: DefaultMaxWaiters, maxPerKey: DefaultMaxWaitersPerKey,
		timeout: DefaultTimeout, failure: failLocal, instances: 1, fallbackKeys: DefaultFallbackKeys}
}

// failure is what a policy does when Redis cannot decide.
type failure uint8

const (
	failLocal failure = iota
	failOpen
	failClosed
)

// WithName names the policy: the name goes into limiter names, headers and
// 429 bodies. Middlewares on one Client with the same name share one budget,
// and must have the same rate and key. A name is 1 to 64 printable ASCII
// characters. Without a name, a policy is named after its rate (see
// package documentation), and shares its budget with no other.
func WithName(name string) Option {
	return func(s *settings) { s.name, s.named = name, true }
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

// WithTimeout bounds the Redis round trips of a decision. The default is
// 100 ms.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) { s.timeout = d }
}

// WithFailLocal is the default failure policy: while Redis cannot decide (a
// round trip failed or timed out), each process limits each key in memory
// at the rate divided by instances (rounded up, at least 1 permit), with the
// same keys, names, headers and 429s, so that a slow or unreachable Redis
// limits each process to its share instead of serving everyone. Give the
// number of processes that share the limit. Redis decides again once a
// round trip succeeds: a request tries it at most once a second. Requests
// denied by Redis before the outage stay denied until their retry time
// (the core's denial cache). The fallback keeps at most
// DefaultFallbackKeys keys per policy in memory.
func WithFailLocal(instances int) Option {
	return func(s *settings) { s.failure, s.instances = failLocal, instances }
}

// WithFailOpen serves requests whose decision failed, and passes the error
// to the error handler: an outage turns limiting off.
func WithFailOpen() Option {
	return func(s *settings) { s.failure = failOpen }
}

// WithFailClosed answers 503 to requests whose decision failed.
func WithFailClosed() Option {
	return func(s *settings) { s.failure = failClosed }
}

// WithRateFunc chooses the rate of each request, such as a plan's: f
// returns it from the request (a user's tier set by authentication, a
// header, a tenant); an error, or an invalid rate, fails the decision. The
// rate given to New still names an unnamed policy. The limiter name does
// not change with the rate: a user who moves from one rate to another keeps
// one budget, its rate updated in place with its history; to give each rate
// a budget of its own, put the tier in the key. The headers show the rate
// used. Each distinct rate is validated and prepared once; at most 256 are
// kept, and further ones are prepared for each request.
func WithRateFunc(f func(keyfunc.Request) (core.Rate, error)) Option {
	return func(s *settings) { s.rateFunc = f }
}

// WithCostFunc chooses the permits each request takes, such as a batch's
// item count: f returns them from the request. A cost above the rate can
// never be granted: such a request is answered 413 with a problem+json
// body, not 429. A cost below 1, or an error, fails the decision.
func WithCostFunc(f func(keyfunc.Request) (int64, error)) Option {
	return func(s *settings) { s.costFunc = f }
}

// WithRefund gives back the permits of a request whose response status
// matches: its own grant, exactly, before the middleware returns. Counting
// only failed logins is WithRefund(func(s int) bool { return s < 400 }).
// A refund that fails (Redis down) is logged and not retried.
func WithRefund(refund func(status int) bool) Option {
	return func(s *settings) { s.refund = refund }
}

// WithDryRun decides every request against Redis as usual (so budgets and
// metrics are real) but serves them all: a request over the limit gets no
// 429 and no Retry-After, and the observer sees a dry-run denial. The rate
// limit headers are left out of dry-run denials unless headers is true.
func WithDryRun(headers bool) Option {
	return func(s *settings) { s.dryRun, s.dryRunHeaders = true, headers }
}

// WithObserver reports each decision, and each change of the local
// fallback, to o (package observe; metrics/prometheus and metrics/otel
// implement it). Without one, nothing is measured.
func WithObserver(o observe.Observer) Option {
	return func(s *settings) { s.observer = o }
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

// WithoutHeaders writes no rate limit headers; a 429 or 503 still carries
// Retry-After.
func WithoutHeaders() Option {
	return func(s *settings) { s.headers = headersNone }
}

// WithMissingKeyIP limits a request that has no key (its key function
// found no user, API key or route) by its client IP, keyfunc.IP(opts...),
// in a namespace of its own: the limiter "<name>::ip:<address>", apart
// from every key. This is the default, with the TCP peer as the address;
// behind a proxy, pass keyfunc.TrustProxies, or all requests without a key
// share the proxy's budget.
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
