// Package ginrl is gin middleware for redlimit: each request takes permits
// from a distributed limiter in Redis, or is rejected with 429, or waits
// for a permit.
//
//	engine := gin.New()
//	engine.Use(ginrl.New(client, core.PerMinute(100), ginrl.WithName("global")))
//	engine.POST("/login", ginrl.New(client, core.PerMinute(5), ginrl.WithName("login")), login)
//
// The behaviour (limiter names, shared budgets, requests without a key,
// wait mode, failure policy, headers) is that of package policy, and the
// options have the same names in nethttprl, echorl and fiberrl. A key can
// be read from the *gin.Context with Key, or built with package keyfunc.
// Route keys (keyfunc.Route) use gin's route template, c.FullPath()
// ("/users/:id"), known in global middleware too.
//
// A configuration mistake, such as an invalid rate, cost, name, wait or
// timeout, or a name already used with another rate, makes New panic with
// a message naming the option, as gin panics on a conflicting route.
//
// The client address is the TCP peer, c.Request.RemoteAddr, never
// c.ClientIP(): unless SetTrustedProxies is called, gin trusts
// X-Forwarded-For from any peer, so a client could choose its own key.
// Behind a proxy, tell keyfunc.IP which proxies to trust
// (keyfunc.TrustProxies).
package ginrl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config struct {
	policy  []policy.Option
	skip    func(*gin.Context) bool
	deny    gin.HandlerFunc
	onError func(*gin.Context, error)
}

func shared(o policy.Option) Option { return func(c *config) { c.policy = append(c.policy, o) } }

// WithName names the limit: the name goes into limiter names and headers.
// Middlewares on one client share a budget only when they have the same
// name, and then they must have the same rate and key. Without a name, a
// middleware is named after its rate ("100-per-1m"), and shares its budget
// with no other.
func WithName(name string) Option { return shared(policy.WithName(name)) }

// WithKey sets the key functions, joined, that say who is limited.
// Default: the client IP, keyfunc.IP().
func WithKey(keys ...keyfunc.KeyFunc) Option { return shared(policy.WithKey(keys...)) }

// WithCost sets the permits each request takes. Default 1.
func WithCost(permits int64) Option { return shared(policy.WithCost(permits)) }

// WithWait makes requests over the limit wait up to maxWait for a permit
// (when the exact wait fits) instead of being rejected at once.
func WithWait(maxWait time.Duration) Option { return shared(policy.WithWait(maxWait)) }

// WithMaxWaiters bounds the requests waiting at once. Default 1024.
func WithMaxWaiters(n int) Option { return shared(policy.WithMaxWaiters(n)) }

// WithTimeout bounds each Redis round trip. Default 100 ms.
func WithTimeout(d time.Duration) Option { return shared(policy.WithTimeout(d)) }

// WithMaxWaitersPerKey bounds the requests waiting at once on one key.
// Default 32.
func WithMaxWaitersPerKey(n int) Option { return shared(policy.WithMaxWaitersPerKey(n)) }

// WithFailLocal limits each key in memory, at the rate divided by
// instances, while Redis cannot decide (the default, with one instance).
func WithFailLocal(instances int) Option { return shared(policy.WithFailLocal(instances)) }

// WithFailOpen serves requests when Redis cannot decide.
func WithFailOpen() Option { return shared(policy.WithFailOpen()) }

// WithFailClosed answers 503 when Redis cannot decide.
func WithFailClosed() Option { return shared(policy.WithFailClosed()) }

// WithRateFunc chooses each request's rate, such as its user's plan.
func WithRateFunc(f func(keyfunc.Request) (core.Rate, error)) Option {
	return shared(policy.WithRateFunc(f))
}

// WithRates chooses each request's rate from the framework's context.
func WithRates(f func(*gin.Context) (core.Rate, error)) Option {
	return WithRateFunc(func(r keyfunc.Request) (core.Rate, error) {
		q, ok := r.(request)
		if !ok {
			return core.Rate{}, errForeign
		}
		return f(q.c)
	})
}

// WithCostFunc chooses each request's cost; a cost above the rate is
// answered 413.
func WithCostFunc(f func(keyfunc.Request) (int64, error)) Option {
	return shared(policy.WithCostFunc(f))
}

// WithCosts chooses each request's cost from the framework's context.
func WithCosts(f func(*gin.Context) (int64, error)) Option {
	return WithCostFunc(func(r keyfunc.Request) (int64, error) {
		q, ok := r.(request)
		if !ok {
			return 0, errForeign
		}
		return f(q.c)
	})
}

// WithRefund gives back the permits of a request whose response status
// matches refund.
func WithRefund(refund func(status int) bool) Option { return shared(policy.WithRefund(refund)) }

// WithRefundFailed gives back the permits of requests answered 400 or
// above: only successful requests count (fiber's SkipFailedRequests).
func WithRefundFailed() Option { return WithRefund(func(s int) bool { return s >= 400 }) }

// WithRefundSuccessful gives back the permits of requests answered below
// 400: only failed requests count, such as failed logins (fiber's
// SkipSuccessfulRequests).
func WithRefundSuccessful() Option { return WithRefund(func(s int) bool { return s < 400 }) }

// WithDryRun decides as usual but serves every request; headers says
// whether dry-run denials carry the rate limit headers.
func WithDryRun(headers bool) Option { return shared(policy.WithDryRun(headers)) }

// WithObserver reports every decision to o (see package observe).
func WithObserver(o observe.Observer) Option { return shared(policy.WithObserver(o)) }

// WithIETFHeaders writes only the IETF RateLimit and RateLimit-Policy
// fields. Default: those and X-RateLimit-*.
func WithIETFHeaders() Option { return shared(policy.WithIETFHeaders()) }

// WithLegacyHeaders writes only the X-RateLimit-* headers.
func WithLegacyHeaders() Option { return shared(policy.WithLegacyHeaders()) }

// WithoutHeaders writes no rate limit headers but Retry-After.
func WithoutHeaders() Option { return shared(policy.WithoutHeaders()) }

// WithMissingKeyIP limits a request that has no key (no user, API key or
// route) by its client IP, in a namespace of its own (the default). Behind
// a proxy, pass keyfunc.TrustProxies.
func WithMissingKeyIP(opts ...keyfunc.IPOption) Option {
	return shared(policy.WithMissingKeyIP(opts...))
}

// WithMissingKeyDeny answers 403 to a request that has no key.
func WithMissingKeyDeny() Option { return shared(policy.WithMissingKeyDeny()) }

// WithMissingKeyServe serves a request that has no key without a limit.
func WithMissingKeyServe() Option { return shared(policy.WithMissingKeyServe()) }

// WithSkip exempts the requests for which skip returns true.
func WithSkip(skip func(*gin.Context) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithDenyHandler answers requests over the limit instead of the default 429
// problem+json response. The rate limit headers and Retry-After are already
// set; ResultFrom gives the decision. The chain is aborted after it.
func WithDenyHandler(deny gin.HandlerFunc) Option {
	return func(c *config) { c.deny = deny }
}

// WithErrorHandler is called when a decision fails (Redis down or slow under
// WithFailOpen or WithFailClosed, or a key function failed: the default
// local fallback decides without failing), instead of the default, which
// logs. If it aborts the context or writes a response, that response
// stands; otherwise the request is served, or answered 503 under
// WithFailClosed.
func WithErrorHandler(onError func(c *gin.Context, err error)) Option {
	return func(c *config) { c.onError = onError }
}

// Key returns a key function that reads the key from the *gin.Context,
// such as a path parameter or a claim set by authentication:
//
//	ginrl.WithKey(ginrl.Key(func(c *gin.Context) (string, error) { return c.Param("tenant"), nil }))
//
// The key is escaped or hashed before it reaches Redis. An empty key means
// that the request has no key. The function works only in this package's
// middleware.
func Key(f func(*gin.Context) (string, error)) keyfunc.KeyFunc {
	if f == nil {
		panic("ginrl.Key: nil function")
	}
	return func(r keyfunc.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errForeign
		}
		return f(q.c)
	}
}

var errForeign = errors.New("ginrl.Key: a key function of ginrl used outside ginrl's middleware")

// New returns the middleware limiting requests to rate. It panics when the
// rate or an option is invalid, naming it.
func New(client *core.Client, rate core.Rate, opts ...Option) gin.HandlerFunc {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	p, err := policy.New(client, rate, cfg.policy...)
	if err != nil {
		panic(fmt.Errorf("ginrl.New: %w", err))
	}
	return func(c *gin.Context) {
		if cfg.skip != nil && cfg.skip(c) {
			c.Next()
			return
		}
		_, failed := c.Get(redisFailedKey{})
		d := p.Decide(request{c}, failed)
		if d.RedisFailed() {
			c.Set(redisFailedKey{}, true) // later limits decide without Redis
		}
		p.SetHeaders(c.Writer.Header(), d)
		if p.Refused(d) {
			c.Set(refusedKey{}, true) // earlier limits give their grants back
		}
		switch {
		case d.Outcome == policy.Denied && cfg.deny != nil:
			c.Set(resultKey{}, d.Result)
			cfg.deny(c)
			c.Abort()
			return
		case d.Outcome == policy.Failed && cfg.onError != nil:
			cfg.onError(c, d.Err)
			if c.IsAborted() || c.Writer.Written() {
				c.Abort()
				return
			}
		case d.Outcome == policy.Failed:
			p.LogError(c.Request.Context(), d.Err)
		}
		if status, body := p.Reply(d); status != 0 {
			c.Data(status, policy.ProblemContentType, body)
			c.Abort()
			return
		}
		c.Next()
		if !d.Result.Grant.IsZero() {
			_, refused := c.Get(refusedKey{})
			p.Done(c.Request.Context(), d, c.Writer.Status(), refused)
		}
	}
}

// Keys of the request's flags, set with c.Set.
type (
	redisFailedKey struct{} // a limit's Redis round trip failed
	refusedKey     struct{} // a limit refused the request
	resultKey      struct{}
)

// ResultFrom returns the decision of a request denied by the middleware,
// in a deny handler.
func ResultFrom(c *gin.Context) (core.Result, bool) {
	v, _ := c.Get(resultKey{})
	res, ok := v.(core.Result)
	return res, ok
}

// request is the keyfunc.Request of a gin request.
type request struct{ c *gin.Context }

func (q request) Context() context.Context          { return q.c.Request.Context() }
func (q request) Method() string                    { return q.c.Request.Method }
func (q request) Route() (string, error)            { return q.c.FullPath(), nil }
func (q request) Header(name string) string         { return q.c.Request.Header.Get(name) }
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
