// Package echorl is Echo (v4, github.com/labstack/echo/v4) middleware for
// redlimit: each request takes permits from a distributed limiter in Redis,
// or is rejected with 429, or waits for a permit.
//
//	e := echo.New()
//	e.Use(echorl.New(client, core.PerMinute(100)))
//	e.POST("/login", login, echorl.New(client, core.PerMinute(5), echorl.WithName("login")))
//
// The behaviour (limiter names, wait mode, failure policy, headers) is that
// of package policy, and the options have the same names in nethttprl, ginrl
// and fiberrl. Route keys (keyfunc.Route) use Echo's route template, such as
// "/users/:id", which is known in middleware added with e.Use or to a route,
// not in e.Pre. Echo also reports a template for some requests that match
// no route (a 404 under "/users/:id", a 405 on "/a"), so those share that
// route's bucket; the set of keys stays bounded.
//
// The client address is the TCP peer's, and keyfunc.IP reads
// X-Forwarded-For only from the proxies it is told to trust. Echo's
// c.RealIP is not used: unless Echo.IPExtractor is set, it believes the
// X-Forwarded-For and X-Real-IP headers of any client, which would let
// clients pick their own limiter.
package echorl

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

type handlers struct {
	skip    middleware.Skipper
	deny    echo.HandlerFunc
	onError func(echo.Context, error) error
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
func WithSkip(skip middleware.Skipper) Option {
	return func(_ *policy.Settings, h *handlers) { h.skip = skip }
}

// WithDenyHandler answers requests over the limit instead of the default 429
// problem+json response, and the middleware returns its error. The rate
// limit headers and Retry-After are already set; ResultFrom gives the
// decision.
func WithDenyHandler(deny echo.HandlerFunc) Option {
	return func(_ *policy.Settings, h *handlers) { h.deny = deny }
}

// WithErrorHandler is called when no decision could be made (Redis down or
// slow, no key for the request), instead of the default, which logs. If it
// returns an error, the middleware returns it; if it writes a response,
// that response stands; otherwise the failure policy applies: serve (fail
// open) or 503 (fail closed).
func WithErrorHandler(onError func(c echo.Context, err error) error) Option {
	return func(_ *policy.Settings, h *handlers) { h.onError = onError }
}

// New returns the middleware limiting requests to rate. Invalid options
// make every request fail with 500, and the error is passed to the error
// handler: a misconfigured limiter is loud, never silently off.
func New(c *core.Client, rate core.Rate, opts ...Option) echo.MiddlewareFunc {
	s, h := policy.Apply(opts)
	p, err := policy.New(c, rate, s)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err != nil {
				if stop, herr := h.fail(c, nil, err); stop {
					return herr
				}
				return echo.NewHTTPError(http.StatusInternalServerError)
			}
			if h.skip != nil && h.skip(c) {
				return next(c)
			}
			q := requests.Get().(*request)
			q.c = c
			d := p.Decide(q)
			q.c = nil
			requests.Put(q)
			p.SetHeaders(c.Response().Header(), d)
			switch d.Outcome {
			case policy.Denied:
				if h.deny != nil {
					c.Set(resultKey, d.Result)
					return h.deny(c)
				}
				return problem(c, http.StatusTooManyRequests, p.DenyBody())
			case policy.Failed:
				if stop, herr := h.fail(c, p, d.Err); stop {
					return herr
				}
				if p.FailClosed() {
					return problem(c, http.StatusServiceUnavailable, p.UnavailableBody())
				}
			}
			return next(c) // allowed, or failed open
		}
	}
}

// fail passes err to the error handler, or logs it, and reports whether
// the handler ended the request: it returned an error or wrote a response.
func (h *handlers) fail(c echo.Context, p *policy.Policy, err error) (bool, error) {
	if h.onError == nil {
		p.LogError(c.Request().Context(), err)
		return false, nil
	}
	herr := h.onError(c, err)
	return herr != nil || c.Response().Committed, herr
}

// problem writes a 429 or 503 itself rather than returning an
// echo.HTTPError: Echo's HTTPErrorHandler would answer {"message": ...} as
// application/json, and every adapter answers with the policy's RFC 9457
// problem+json body. The Content-Type is set first because c.Blob keeps one
// an earlier middleware set.
func problem(c echo.Context, status int, body []byte) error {
	c.Response().Header().Set(policy.HeaderContentType, policy.ProblemContentType)
	return c.Blob(status, policy.ProblemContentType, body)
}

// resultKey is where a denied request's decision is stored with c.Set.
const resultKey = "github.com/redlimit/redlimit/echorl.result"

// ResultFrom returns the decision of a request denied by the middleware,
// in a deny handler.
func ResultFrom(c echo.Context) (core.Result, bool) {
	res, ok := c.Get(resultKey).(core.Result)
	return res, ok
}

// request is the keyfunc.Request of an Echo request.
type request struct{ c echo.Context }

// requests recycles request values: echo.Context is an interface, so a
// request value would not fit in a keyfunc.Request without an allocation.
// A key function sees a request only during its call.
var requests = sync.Pool{New: func() any { return new(request) }}

func (q *request) Context() context.Context { return q.c.Request().Context() }
func (q *request) Method() string           { return q.c.Request().Method }
func (q *request) Route() string            { return q.c.Path() }
func (q *request) Path() string             { return q.c.Request().URL.Path }
func (q *request) Header(name string) string {
	return q.c.Request().Header.Get(name)
}
func (q *request) HeaderValues(name string) []string { return q.c.Request().Header.Values(name) }
func (q *request) Query(name string) string          { return q.c.QueryParam(name) }
func (q *request) RemoteAddr() string                { return q.c.Request().RemoteAddr }

// Value returns c.Get(key) for a string key when it is set, else the
// request context's value.
func (q *request) Value(key any) any {
	if k, ok := key.(string); ok {
		if v := q.c.Get(k); v != nil {
			return v
		}
	}
	return q.c.Request().Context().Value(key)
}
