package policy

import (
	"time"

	"github.com/redlimit/redlimit/keyfunc"
)

// Defaults of a Policy.
const (
	DefaultName       = "default"
	DefaultTimeout    = 100 * time.Millisecond
	DefaultMaxWaiters = 1024
)

// Settings are the framework-free settings of a Policy. Adapters fill them
// through options; the zero value of each field means its default.
type Settings struct {
	// Name names the policy in limiter names and headers. Default "default":
	// give each policy of an application its own name.
	Name string
	// Keys are the key functions whose parts, joined, identify who is
	// limited. Default: the client IP (keyfunc.IP()).
	Keys []keyfunc.KeyFunc
	// Cost is the number of permits each request takes. Default 1.
	Cost int64
	// MaxWait turns on wait mode: the longest a request waits for a permit.
	// Default 0: reject at once.
	MaxWait time.Duration
	// MaxWaiters bounds the requests waiting at once. Default 1024.
	MaxWaiters int
	// Timeout bounds each Redis round trip of a decision. Default 100 ms.
	Timeout time.Duration
	// FailClosed answers 503 when a decision fails. Default: serve.
	FailClosed bool
	// Headers selects the rate limit headers. Default HeadersAll.
	Headers HeaderStyle
}

// An Option configures a Policy: the shared Settings, and H, the handlers
// of one framework, which only its adapter knows. Adapters declare
// `type Option = policy.Option[handlers]` and wrap the functions below.
type Option[H any] func(*Settings, *H)

// WithName names the policy.
func WithName[H any](name string) Option[H] {
	return func(s *Settings, _ *H) { s.Name = name }
}

// WithKey sets the key functions; several are joined into one key.
func WithKey[H any](keys ...keyfunc.KeyFunc) Option[H] {
	return func(s *Settings, _ *H) { s.Keys = keys }
}

// WithCost sets the permits each request takes.
func WithCost[H any](permits int64) Option[H] {
	return func(s *Settings, _ *H) { s.Cost = permits }
}

// WithWait turns on wait mode with the given maximum wait.
func WithWait[H any](maxWait time.Duration) Option[H] {
	return func(s *Settings, _ *H) { s.MaxWait = maxWait }
}

// WithMaxWaiters bounds the number of requests waiting at once.
func WithMaxWaiters[H any](n int) Option[H] {
	return func(s *Settings, _ *H) { s.MaxWaiters = n }
}

// WithTimeout sets the timeout of each Redis round trip.
func WithTimeout[H any](d time.Duration) Option[H] {
	return func(s *Settings, _ *H) { s.Timeout = d }
}

// WithFailOpen serves requests whose decision failed (the default).
func WithFailOpen[H any]() Option[H] {
	return func(s *Settings, _ *H) { s.FailClosed = false }
}

// WithFailClosed answers 503 to requests whose decision failed.
func WithFailClosed[H any]() Option[H] {
	return func(s *Settings, _ *H) { s.FailClosed = true }
}

// WithHeaders selects the rate limit headers.
func WithHeaders[H any](style HeaderStyle) Option[H] {
	return func(s *Settings, _ *H) { s.Headers = style }
}

// Apply runs opts on fresh Settings and handlers.
func Apply[H any](opts []Option[H]) (Settings, H) {
	var (
		s Settings
		h H
	)
	for _, o := range opts {
		if o != nil {
			o(&s, &h)
		}
	}
	return s, h
}
