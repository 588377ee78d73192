// Package nethttprl is net/http middleware for redlimit: each request takes
// permits from a distributed limiter in Redis, or is rejected with 429, or
// waits for a permit. It works with any router built on net/http (ServeMux,
// chi, gorilla/mux).
//
//	limit := nethttprl.New(client, core.PerMinute(100))
//	http.ListenAndServe(addr, limit(mux))
//
// The behaviour (limiter names, wait mode, failure policy, headers) is that
// of package policy, and the options have the same names in ginrl, echorl
// and fiberrl. Route keys (keyfunc.Route) need the ServeMux pattern, which
// is known only inside the mux: wrap the route's handler, not the mux.
package nethttprl

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

type handlers struct {
	skip    func(*http.Request) bool
	deny    http.Handler
	onError func(http.ResponseWriter, *http.Request, error)
}

// An Option configures the middleware.
type Option = policy.Option[handlers]

// WithName names the policy: it goes into limiter names and headers.
// Default "default"; give each limit of an application its own name.
func WithName(name string) Option { return policy.WithName[handlers](name) }

// WithKey sets the key functions, joined, that say who is limited.
// Default: the client IP, keyfunc.IP().
func WithKey(keys ...keyfunc.KeyFunc) Option { return policy.WithKey[handlers](keys...) }

// WithCost sets the permits each request takes. Default 1.
func WithCost(permits int64) Option { return policy.WithCost[handlers](permits) }

// WithWait makes requests over the limit wait up to maxWait for a permit
// (when the exact wait fits) instead of being rejected at once.
func WithWait(maxWait time.Duration) Option { return policy.WithWait[handlers](maxWait) }

// WithMaxWaiters bounds the requests waiting at once. Default 1024.
func WithMaxWaiters(n int) Option { return policy.WithMaxWaiters[handlers](n) }

// WithTimeout bounds each Redis round trip. Default 100 ms.
func WithTimeout(d time.Duration) Option { return policy.WithTimeout[handlers](d) }

// WithFailOpen serves requests when Redis cannot decide (the default).
func WithFailOpen() Option { return policy.WithFailOpen[handlers]() }

// WithFailClosed answers 503 when Redis cannot decide.
func WithFailClosed() Option { return policy.WithFailClosed[handlers]() }

// WithHeaders selects the rate limit headers. Default policy.HeadersAll.
func WithHeaders(style policy.HeaderStyle) Option { return policy.WithHeaders[handlers](style) }

// WithSkip exempts the requests for which skip returns true.
func WithSkip(skip func(*http.Request) bool) Option {
	return func(_ *policy.Settings, h *handlers) { h.skip = skip }
}

// WithDenyHandler answers requests over the limit instead of the default 429
// problem+json response. The rate limit headers and Retry-After are already
// set; ResultFrom gives the decision.
func WithDenyHandler(deny http.Handler) Option {
	return func(_ *policy.Settings, h *handlers) { h.deny = deny }
}

// WithErrorHandler is called when no decision could be made (Redis down or
// slow, no key for the request), instead of the default, which logs. If it
// writes a response, that response stands; otherwise the failure policy
// applies: serve (fail open) or 503 (fail closed).
func WithErrorHandler(onError func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(_ *policy.Settings, h *handlers) { h.onError = onError }
}

// New returns the middleware limiting requests to rate. Invalid options
// make every request fail with 500, and the error is passed to the error
// handler: a misconfigured limiter is loud, never silently off.
func New(c *core.Client, rate core.Rate, opts ...Option) func(http.Handler) http.Handler {
	s, h := policy.Apply(opts)
	p, err := policy.New(c, rate, s)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err != nil {
				if !h.fail(w, r, nil, err) {
					http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
				}
				return
			}
			if h.skip != nil && h.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			d := p.Decide(request{r})
			p.SetHeaders(w.Header(), d)
			switch d.Outcome {
			case policy.Allowed:
				next.ServeHTTP(w, r)
			case policy.Denied:
				if h.deny != nil {
					h.deny.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), resultKey{}, d.Result)))
					return
				}
				problem(w, http.StatusTooManyRequests, p.DenyBody())
			case policy.Failed:
				if h.fail(w, r, p, d.Err) {
					return
				}
				if p.FailClosed() {
					problem(w, http.StatusServiceUnavailable, p.UnavailableBody())
					return
				}
				next.ServeHTTP(w, r)
			}
		})
	}
}

// fail passes err to the error handler, or logs it, and reports whether
// the handler wrote a response.
func (h *handlers) fail(w http.ResponseWriter, r *http.Request, p *policy.Policy, err error) bool {
	if h.onError == nil {
		p.LogError(r.Context(), err)
		return false
	}
	rw := &watch{ResponseWriter: w}
	h.onError(rw, r, err)
	return rw.wrote
}

func problem(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set(policy.HeaderContentType, policy.ProblemContentType)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

type resultKey struct{}

// ResultFrom returns the decision of a request denied by the middleware,
// in a deny handler.
func ResultFrom(r *http.Request) (core.Result, bool) {
	res, ok := r.Context().Value(resultKey{}).(core.Result)
	return res, ok
}

// watch records whether an error handler wrote a response.
type watch struct {
	http.ResponseWriter
	wrote bool
}

func (w *watch) WriteHeader(code int) { w.wrote = true; w.ResponseWriter.WriteHeader(code) }

func (w *watch) Write(b []byte) (int, error) { w.wrote = true; return w.ResponseWriter.Write(b) }

func (w *watch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// request is the keyfunc.Request of a net/http request.
type request struct{ r *http.Request }

func (q request) Context() context.Context { return q.r.Context() }
func (q request) Method() string           { return q.r.Method }
func (q request) Path() string             { return q.r.URL.Path }
func (q request) Header(name string) string {
	return q.r.Header.Get(name)
}
func (q request) HeaderValues(name string) []string { return q.r.Header.Values(name) }
func (q request) Query(name string) string          { return q.r.URL.Query().Get(name) }
func (q request) RemoteAddr() string                { return q.r.RemoteAddr }
func (q request) Value(key any) any                 { return q.r.Context().Value(key) }

// Route returns the ServeMux pattern without its method, which
// keyfunc.Route adds itself: "GET /users/{id}" gives "/users/{id}".
func (q request) Route() string {
	pattern := q.r.Pattern
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		return strings.TrimLeft(pattern[i+1:], " \t")
	}
	return pattern
}
