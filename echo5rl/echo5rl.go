// Package echo5rl applies redlimit policies (package policy) to Echo v5
// (github.com/labstack/echo/v5): each request takes permits from a
// distributed limiter in Redis, or is refused, or waits for a permit.
//
//	e.Use(echo5rl.New(policy.MustNew(client, "global", core.PerMinute(100))))
//	e.POST("/login", login, echo5rl.New(policy.MustNew(client, "login", core.PerMinute(5))))
//
// What a request gets is the policy's; this package only translates. As
// Echo's own middlewares do, it returns refusals as errors to the
// application's HTTPErrorHandler, headers already set. Such an error
// carries the status (echo.StatusCode) and unwraps to an *echo.HTTPError;
// Echo's DefaultHTTPErrorHandler writes it as the RFC 9457 problem object,
// in JSON, and ProblemDetailsHTTPErrorHandler as application/problem+json
// with the problem's standard members. Route keys use Echo's route template
// ("/users/:id"), known in e.Use but not in e.Pre. The client address is
// the TCP peer's, whatever Echo's IPExtractor; behind a proxy, tell
// keyfunc.IP which proxies to trust (keyfunc.TrustProxies).
package echo5rl

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/native"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config = native.Config[middleware.Skipper, echo.HandlerFunc, func(*echo.Context, error) error]

// WithSkip exempts the requests for which skip returns true.
func WithSkip(skip middleware.Skipper) Option { return func(c *config) { c.Skip = skip } }

// WithDenyHandler answers requests over the limit instead of the default
// 429; the headers are set, and ResultFrom gives the decision.
func WithDenyHandler(deny echo.HandlerFunc) Option { return func(c *config) { c.Deny = deny } }

// WithErrorHandler receives the errors the policy reports (Decision.Err)
// instead of the log. If it returns an error or commits a response, that
// stands; otherwise the policy's decision applies.
func WithErrorHandler(onError func(c *echo.Context, err error) error) Option {
	return func(c *config) { c.OnError = onError }
}

// New returns the middleware that applies p. It panics if p is nil.
func New(p *policy.Policy, opts ...Option) echo.MiddlewareFunc {
	cfg := native.Configure[config]("echo5rl.New", p, opts)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		flow := native.Flow[*echo.Context]{
			Refuse: func(_ *echo.Context, status int, body []byte) error { return &refusal{status, body} },
			Next: func(c *echo.Context) (int, error) {
				err := next(c)
				// The status written, or the one the error handler will write.
				_, status := echo.ResolveResponseStatus(c.Response(), err)
				return status, err
			},
		}
		flow.Handlers(cfg.OnError, committed, cfg.Deny)
		return func(c *echo.Context) error {
			if cfg.Skip != nil && cfg.Skip(c) {
				return next(c)
			}
			return flow.Serve(p, &exchange{c: c}, c)
		}
	}
}

// committed returns a function that reports whether c's response is
// written.
func committed(c *echo.Context) func() bool {
	return func() bool {
		r, err := echo.UnwrapResponse(c.Response())
		return err == nil && r.Committed
	}
}

// refusal is the error of a refused request, with its problem object.
type refusal struct {
	status int
	body   []byte
}

func (r *refusal) Error() string                { return "echo5rl: " + http.StatusText(r.status) }
func (r *refusal) StatusCode() int              { return r.status }
func (r *refusal) MarshalJSON() ([]byte, error) { return r.body, nil }
func (r *refusal) Unwrap() error                { return echo.NewHTTPError(r.status, http.StatusText(r.status)) }

// ProblemError returns the problem's standard members, for Echo's
// ProblemDetailsHTTPErrorHandler.
func (r *refusal) ProblemError() *echo.ProblemError {
	pe := &echo.ProblemError{Status: r.status}
	_ = json.Unmarshal(r.body, pe) // the policy's own JSON
	return pe
}

// ResultFrom returns the decision of the request: in a deny handler, the
// refusal; in the handlers of a request served, the decision with the
// fewest permits left of the policies that limit it (remaining permits,
// reset time), as its X-RateLimit-* headers show. It reports false before
// any policy decided the request.
func ResultFrom(c *echo.Context) (core.Result, bool) { return policy.ResultFrom(c.Request().Context()) }

// Key returns a key function that reads the key from the *echo.Context, such as
// a path parameter or a value set with c.Set; an empty key means that the request has none.
func Key(f func(*echo.Context) (string, error)) keyfunc.KeyFunc { return native.Func("echo5rl", f) }

// RateFunc returns a rate function that reads the rate from the *echo.Context.
func RateFunc(f func(*echo.Context) (core.Rate, error)) policy.RateFunc {
	return native.Func("echo5rl", f)
}

// CostFunc returns a cost function that reads the cost from the *echo.Context.
func CostFunc(f func(*echo.Context) (int64, error)) policy.CostFunc {
	return native.Func("echo5rl", f)
}

// exchange is the policy.Exchange of an Echo request.
type exchange struct {
	c             *echo.Context
	headers       native.Headers // the values of the fields the policy sets
	native.Shared                // what the request's policies share
}

func (x *exchange) Native() *echo.Context          { return x.c }
func (x *exchange) Context() context.Context       { return x.c.Request().Context() }
func (x *exchange) SetContext(ctx context.Context) { x.c.SetRequest(x.c.Request().WithContext(ctx)) }
func (x *exchange) SetHeader(name, value string) {
	x.headers.Set(x.c.Response().Header(), name, value)
}
func (x *exchange) Route() (string, error) {
	return native.Route(x.c.Request().Method, x.c.Path()), nil
}
func (x *exchange) Header(name string) string         { return x.c.Request().Header.Get(name) }
func (x *exchange) HeaderValues(name string) []string { return x.c.Request().Header.Values(name) }
func (x *exchange) Query(name string) string          { return x.c.QueryParam(name) }
func (x *exchange) RemoteAddr() string                { return x.c.Request().RemoteAddr }

// Value returns c.Get(key) for a string key, else the context's value.
func (x *exchange) Value(key any) any {
	if k, ok := key.(string); ok {
		if v := x.c.Get(k); v != nil {
			return v
		}
	}
	return x.c.Request().Context().Value(key)
}
