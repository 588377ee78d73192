// Package ginrl applies redlimit policies (package policy) to gin
// requests: each request takes permits from a distributed limiter in Redis,
// or is refused with 429, or waits for a permit.
//
//	engine.Use(ginrl.New(policy.MustNew(client, "global", core.PerMinute(100))))
//	login := policy.MustNew(client, "login", core.PerMinute(5), policy.WithWait(3*time.Second))
//	engine.POST("/login", ginrl.New(login), handleLogin)
//
// What a request gets (keys, rates, costs, waits, the failure policy,
// headers) is the policy's; this package only translates. Key, RateFunc and
// CostFunc read a key, a rate or a cost from the *gin.Context. Route keys
// (keyfunc.Route) use gin's route template, c.FullPath() ("/users/:id"),
// known in global middleware too.
//
// The client address is the TCP peer, c.Request.RemoteAddr, never
// c.ClientIP(): unless SetTrustedProxies is called, gin trusts
// X-Forwarded-For from any peer, so a client could choose its own key.
// Behind a proxy, tell keyfunc.IP which proxies to trust
// (keyfunc.TrustProxies).
package ginrl

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/native"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config = native.Config[func(*gin.Context) bool, gin.HandlerFunc, func(*gin.Context, error)]

// WithSkip exempts the requests for which skip returns true.
func WithSkip(skip func(*gin.Context) bool) Option { return func(c *config) { c.Skip = skip } }

// WithDenyHandler answers requests over the limit instead of the default
// 429; the headers are set, and ResultFrom gives the decision.
func WithDenyHandler(deny gin.HandlerFunc) Option { return func(c *config) { c.Deny = deny } }

// WithErrorHandler receives the errors the policy reports (Decision.Err)
// instead of the log. If it aborts or writes a response, that stands;
// otherwise the policy's decision applies.
func WithErrorHandler(onError func(c *gin.Context, err error)) Option {
	return func(c *config) { c.OnError = onError }
}

// New returns the middleware that applies p. It panics if p is nil.
func New(p *policy.Policy, opts ...Option) gin.HandlerFunc {
	cfg := native.Configure[config]("ginrl.New", p, opts)
	flow := native.Flow[*gin.Context]{
		Refuse: func(c *gin.Context, status int, body []byte) error {
			c.Data(status, policy.ProblemContentType, body)
			c.Abort()
			return nil
		},
		Next: func(c *gin.Context) (int, error) { c.Next(); return c.Writer.Status(), nil },
	}
	if cfg.OnError != nil {
		flow.OnError = func(c *gin.Context, err error) (bool, error) {
			cfg.OnError(c, err)
			answered := c.IsAborted() || c.Writer.Written()
			if answered {
				c.Abort()
			}
			return answered, nil
		}
	}
	if cfg.Deny != nil {
		flow.Deny = func(c *gin.Context) error {
			cfg.Deny(c)
			c.Abort()
			return nil
		}
	}
	return func(c *gin.Context) {
		if cfg.Skip != nil && cfg.Skip(c) {
			c.Next()
			return
		}
		_ = flow.Serve(p, &exchange{c: c}, c)
	}
}

// ResultFrom returns the decision of the request: in a deny handler, the
// refusal; in the handlers of a request served, the decision with the
// fewest permits left of the policies that limit it (remaining permits,
// reset time), as its X-RateLimit-* headers show. It reports false before
// any policy decided the request.
func ResultFrom(c *gin.Context) (core.Result, bool) {
	if c.Request == nil {
		return core.Result{}, false
	}
	return policy.ResultFrom(c.Request.Context())
}

// Key returns a key function that reads the key from the *gin.Context, such as
// a path parameter or a value set with c.Set; an empty key means that the request has none.
func Key(f func(*gin.Context) (string, error)) keyfunc.KeyFunc { return native.Func("ginrl", f) }

// RateFunc returns a rate function that reads the rate from the *gin.Context.
func RateFunc(f func(*gin.Context) (core.Rate, error)) policy.RateFunc {
	return native.Func("ginrl", f)
}

// CostFunc returns a cost function that reads the cost from the *gin.Context.
func CostFunc(f func(*gin.Context) (int64, error)) policy.CostFunc { return native.Func("ginrl", f) }

// exchange is the policy.Exchange of a gin request.
type exchange struct {
	c             *gin.Context
	headers       native.Headers // the values of the fields the policy sets
	native.Shared                // what the request's policies share
}

func (x *exchange) Native() *gin.Context           { return x.c }
func (x *exchange) Context() context.Context       { return x.c.Request.Context() }
func (x *exchange) SetContext(ctx context.Context) { x.c.Request = x.c.Request.WithContext(ctx) }
func (x *exchange) SetHeader(name, value string)   { x.headers.Set(x.c.Writer.Header(), name, value) }
func (x *exchange) Route() (string, error) {
	return native.Route(x.c.Request.Method, x.c.FullPath()), nil
}
func (x *exchange) Header(name string) string         { return x.c.Request.Header.Get(name) }
func (x *exchange) HeaderValues(name string) []string { return x.c.Request.Header.Values(name) }
func (x *exchange) Query(name string) string          { return x.c.Query(name) }
func (x *exchange) RemoteAddr() string                { return x.c.Request.RemoteAddr }

// Value returns the value set with c.Set, else the request context's.
func (x *exchange) Value(key any) any {
	if v, ok := x.c.Get(key); ok {
		return v
	}
	return x.c.Request.Context().Value(key)
}
