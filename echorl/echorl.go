// Package echorl is Echo (v4, github.com/labstack/echo/v4) middleware for
// redlimit: each request takes permits from a distributed limiter in Redis,
// or is rejected with 429, or waits for a permit.
//
//	e := echo.New()
//	e.Use(echorl.New(client, core.PerMinute(100), echorl.WithName("global")))
//	e.POST("/login", login, echorl.New(client, core.PerMinute(5), echorl.WithName("login")))
//
// The behaviour (limiter names, shared budgets, requests without a key,
// wait mode, failure policy, headers) is that of package policy, and the
// options have the same names in nethttprl, ginrl and fiberrl. A key can
// be read from the echo.Context with Key, or built with package keyfunc.
//
// A configuration mistake, such as an invalid rate, cost, name, wait or
// timeout, or a name already used with another rate, makes New panic with
// a message naming the option.
//
// # Errors go to the HTTPErrorHandler
//
// As Echo's own middlewares do, the middleware returns its refusals as an
// *echo.HTTPError, which Echo passes to the application's HTTPErrorHandler:
// 429 over the limit, 403 for a request without a key under
// WithMissingKeyDeny, 503 when failing closed. The rate limit headers and
// Retry-After are set on the response first. The error's Message is the
// RFC 9457 problem object: Echo's DefaultHTTPErrorHandler writes it as
// the JSON body (with the Content-Type application/json), and it prints as
// the status text. WithDenyHandler answers over-limit requests otherwise.
//
// # Routes
//
// Route keys (keyfunc.Route) use Echo's route template, such as
// "/users/:id", which is known in middleware added with e.Use or to a
// route. In e.Pre, which runs before routing, no request has a route yet:
// each is taken for one that matched no route, so the missing-key choice
// applies to all. Echo also reports a template for some requests that
// match no route (a 405 on "/a"), so those share that route's bucket.
//
// The client address is the TCP peer's, and keyfunc.IP reads
// X-Forwarded-For only from the proxies it is told to trust. Echo's
// c.RealIP is not used: unless Echo.IPExtractor is set, it believes the
// X-Forwarded-For and X-Real-IP headers of any client, which would let
// clients pick their own limiter.
package echorl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config struct {
	policy  []policy.Option
	skip    middleware.Skipper
	deny    echo.HandlerFunc
	onError func(echo.Context, error) error
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
func WithRates(f func(echo.Context) (core.Rate, error)) Option {
	return WithRateFunc(func(r keyfunc.Request) (core.Rate, error) {
		q, ok := r.(*request)
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
func WithCosts(f func(echo.Context) (int64, error)) Option {
	return WithCostFunc(func(r keyfunc.Request) (int64, error) {
		q, ok := r.(*request)
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
func WithSkip(skip middleware.Skipper) Option {
	return func(c *config) { c.skip = skip }
}

// WithDenyHandler answers requests over the limit instead of the default
// *echo.HTTPError, and the middleware returns its error. The rate limit
// headers and Retry-After are already set; ResultFrom gives the decision.
func WithDenyHandler(deny echo.HandlerFunc) Option {
	return func(c *config) { c.deny = deny }
}

// WithErrorHandler is called when a decision fails (Redis down or slow under
// WithFailOpen or WithFailClosed, or a key function failed: the default
// local fallback decides without failing), instead of the default, which
// logs. If it returns an error, the middleware returns it; if it writes a
// response, that response stands; otherwise the request is served, or
// refused with 503 under WithFailClosed.
func WithErrorHandler(onError func(c echo.Context, err error) error) Option {
	return func(c *config) { c.onError = onError }
}

// Key returns a key function that reads the key from the echo.Context,
// such as a path parameter or a claim set by authentication:
//
//	echorl.WithKey(echorl.Key(func(c echo.Context) (string, error) { return c.Param("tenant"), nil }))
//
// The key is escaped or hashed before it reaches Redis. An empty key means
// that the request has no key. The function works only in this package's
// middleware.
func Key(f func(echo.Context) (string, error)) keyfunc.KeyFunc {
	if f == nil {
		panic("echorl.Key: nil function")
	}
	return func(r keyfunc.Request) (string, error) {
		q, ok := r.(*request)
		if !ok {
			return "", errForeign
		}
		return f(q.c)
	}
}

var errForeign = errors.New("echorl.Key: a key function of echorl used outside echorl's middleware")

// New returns the middleware limiting requests to rate. It panics when the
// rate or an option is invalid, naming it.
func New(client *core.Client, rate core.Rate, opts ...Option) echo.MiddlewareFunc {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	p, err := policy.New(client, rate, cfg.policy...)
	if err != nil {
		panic(fmt.Errorf("echorl.New: %w", err))
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.skip != nil && cfg.skip(c) {
				return next(c)
			}
			d := p.Decide(&request{c}, c.Get(redisFailedKey) != nil)
			if d.RedisFailed() {
				c.Set(redisFailedKey, true) // later limits decide without Redis
			}
			p.SetHeaders(c.Response().Header(), d)
			if p.Refused(d) {
				c.Set(refusedKey, true) // earlier limits give their grants back
			}
			switch {
			case d.Outcome == policy.Denied && cfg.deny != nil:
				c.Set(resultKey, d.Result)
				return cfg.deny(c)
			case d.Outcome == policy.Failed && cfg.onError != nil:
				if err := cfg.onError(c, d.Err); err != nil || c.Response().Committed {
					return err
				}
			case d.Outcome == policy.Failed:
				p.LogError(c.Request().Context(), d.Err)
			}
			if status, body := p.Reply(d); status != 0 {
				return &echo.HTTPError{Code: status, Message: problem{status, body}}
			}
			err := next(c)
			if !d.Result.Grant.IsZero() {
				p.Done(c.Request().Context(), d, status(c, err), c.Get(refusedKey) != nil)
			}
			return err
		}
	}
}

// status returns the status of the response to c: the one written, or,
// when the handler returned err for the app's error handler to answer,
// the one it will write.
func status(c echo.Context, err error) int {
	if c.Response().Committed || err == nil {
		return c.Response().Status
	}
	if he, ok := err.(*echo.HTTPError); ok {
		return he.Code
	}
	return http.StatusInternalServerError
}

// Keys of the request's flags, set with c.Set.
const (
	redisFailedKey = "github.com/redlimit/redlimit/echorl.redisFailed" // a limit's Redis round trip failed
	refusedKey     = "github.com/redlimit/redlimit/echorl.refused"     // a limit refused the request
)

// problem is the Message of the *echo.HTTPError of a refusal: its JSON is
// the RFC 9457 problem object, and it prints as the status text.
type problem struct {
	status int
	body   []byte
}

func (p problem) MarshalJSON() ([]byte, error) { return p.body, nil }
func (p problem) String() string               { return http.StatusText(p.status) }

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

func (q *request) Context() context.Context          { return q.c.Request().Context() }
func (q *request) Method() string                    { return q.c.Request().Method }
func (q *request) Route() (string, error)            { return q.c.Path(), nil }
func (q *request) Header(name string) string         { return q.c.Request().Header.Get(name) }
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
