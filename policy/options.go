package policy

import (
	"time"

	"github.com/redlimit/redlimit/keyfunc"
)

// Defaults of a Policy.
const (
	DefaultTimeout    = 100 * time.Millisecond
	DefaultMaxWaiters = 1024
)

// An Option configures a Policy. Adapters wrap each one in an option of
// their own type, under the same name.
type Option func(*settings)

// settings are a Policy's options, defaults first.
type settings struct {
	name       string
	named      bool
	keys       []keyfunc.KeyFunc
	keySet     bool
	cost       int64
	maxWait    time.Duration
	maxWaiters int
	timeout    time.Duration
	failClosed bool
	headers    headerStyle
	missing    missingKey
	missingIP  []keyfunc.IPOption
}

func defaults() settings {
	return settings{cost: 1, maxWaiters: DefaultMaxWaiters, timeout: DefaultTimeout}
}

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

// WithTimeout bounds each Redis round trip of a decision. The default is
// 100 ms.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) { s.timeout = d }
}

// WithFailOpen serves requests whose decision failed (the default).
func WithFailOpen() Option {
	return func(s *settings) { s.failClosed = false }
}

// WithFailClosed answers 503 to requests whose decision failed.
func WithFailClosed() Option {
	return func(s *settings) { s.failClosed = true }
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
