// Package ginrl is gin middleware for redlimit: each request takes permits
// from a distributed limiter in Redis, or is rejected with 429, or waits
// for a permit.
//
//	engine := gin.New()
//	engine.Use(ginrl.New(client, core.PerMinute(100)))
//	engine.POST("/login", ginrl.New(client, core.PerMinute(5), ginrl.WithName("login")), login)
//
// The behaviour (limiter names, wait mode, failure policy, headers) is that
// of package policy, and the options have the same names in nethttprl,
// echorl and fiberrl. Route keys (keyfunc.Route) use gin's route template,
// c.FullPath() ("/users/:id"), known in global middleware too.
//
// The client address is the TCP peer, c.Request.RemoteAddr, never
// c.ClientIP(): unless SetTrustedProxies is called, gin trusts
// X-Forwarded-For from any peer, so a client could choose its own key.
// Behind a proxy, tell keyfunc.IP which proxies to trust
// (keyfunc.TrustProxies).
package ginrl

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

type handlers struct {
	skip    func(*gin.Context) bool
	deny    gin.HandlerFunc
	onError func(*gin.Context, error)
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
func WithSkip(skip func(*gin.Context) bool) Option {
	return func(_ *policy.Settings, h *handlers) { h.skip = skip }
}

// WithDenyHandler answers requests over the limit instead of the default 429
// problem+json response. The rate limit headers and Retry-After are already
// set; ResultFrom gives the decision. The chain is aborted after it.
func WithDenyHandler(deny gin.HandlerFunc) Option {
	return func(_ *policy.Settings, h *handlers) { h.deny = deny }
}

// WithErrorHandler is called when no decision could be made (Redis down or
// slow, no key for the request), instead of the default, which logs. If it
// aborts the context or writes a response, that response stands; otherwise
// the failure policy applies: serve (fail open) or 503 (fail closed).
func WithErrorHandler(onError func(c *gin.Context, err error)) Option {
	return func(_ *policy.Settings, h *handlers) { h.onError = onError }
}

// New returns the middleware limiting requests to rate. Invalid options
// make every request fail with 500, and the error is passed to the error
// handler: a misconfigured limiter is loud, never silently off.
func New(c *core.Client, rate core.Rate, opts ...Option) gin.HandlerFunc {
	s, h := policy.Apply(opts)
	p, err := policy.New(c, rate, s)
	return func(c *gin.Context) {
		if err != nil {
			if !h.fail(c, nil, err) {
				c.String(http.StatusInternalServerError, http.StatusText(http.StatusInternalServerError))
				c.Abort()
			}
			return
		}
		if h.skip != nil && h.skip(c) {
			c.Next()
			return
		}
		d := p.Decide(request{c})
		p.SetHeaders(c.Writer.Header(), d)
		switch d.Outcome {
		case policy.Allowed:
			c.Next()
		case policy.Denied:
			if h.deny != nil {
				c.Set(resultKey{}, d.Result)
				h.deny(c)
				c.Abort()
				return
			}
			problem(c, http.StatusTooManyRequests, p.DenyBody())
		case policy.Failed:
			if h.fail(c, p, d.Err) {
				return
			}
			if p.FailClosed() {
				problem(c, http.StatusServiceUnavailable, p.UnavailableBody())
				return
			}
			c.Next()
		}
	}
}

// fail passes err to the error handler, or logs it, and reports whether
// the handler answered the request (aborted or wrote); then it aborts.
func (h *handlers) fail(c *gin.Context, p *policy.Policy, err error) bool {
	if h.onError == nil {
		p.LogError(c.Request.Context(), err)
		return false
	}
	h.onError(c, err)
	if c.IsAborted() || c.Writer.Written() {
		c.Abort()
		return true
	}
	return false
}

func problem(c *gin.Context, status int, body []byte) {
	c.Data(status, policy.ProblemContentType, body)
	c.Abort()
}

type resultKey struct{}

// ResultFrom returns the decision of a request denied by the middleware,
// in a deny handler.
func ResultFrom(c *gin.Context) (core.Result, bool) {
	v, _ := c.Get(resultKey{})
	res, ok := v.(core.Result)
	return res, ok
}

// request is the keyfunc.Request of a gin request.
type request struct{ c *gin.Context }

func (q request) Context() context.Context { return q.c.Request.Context() }
func (q request) Method() string           { return q.c.Request.Method }
func (q request) Route() string            { return q.c.FullPath() }
func (q request) Path() string             { return q.c.Request.URL.Path }
func (q request) Header(name string) string {
	return q.c.Request.Header.Get(name)
}
func (q request) HeaderValues(name string) []string { return q.c.Request.Header.Values(name) }
func (q request) Query(name string) string          { return q.c.Query(name) }
func (q request) RemoteAddr() string                { return q.c.Request.RemoteAddr }

// Value returns the value set with c.Set, else the request context's.
func (q request) Value(key any) any {
	if v, ok := q.c.Get(key); ok {
		return v
	}
	return q.c.Request.Context().Value(key)
}
