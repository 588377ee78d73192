// Package echorl applies redlimit policies (package policy) to Echo v4
// (github.com/labstack/echo/v4): each request takes permits from a
// distributed limiter in Redis, or is refused, or waits for a permit.
//
//	e.Use(echorl.New(policy.MustNew(client, "global", core.PerMinute(100))))
//	e.POST("/login", login, echorl.New(policy.MustNew(client, "login", core.PerMinute(5))))
//
// What a request gets is the policy's; this package only translates. As
// Echo's own middlewares do, it returns refusals as an *echo.HTTPError to
// the application's HTTPErrorHandler, headers already set; its Message is
// the RFC 9457 problem object, written by Echo's default handler as JSON.
// Route keys use Echo's route template ("/users/:id"), known in e.Use but
// not in e.Pre. The client address is the TCP peer's, not c.RealIP(), which
// believes forwarding headers from any client unless IPExtractor is set.
package echorl

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/native"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config = native.Config[middleware.Skipper, echo.HandlerFunc, func(echo.Context, error) error]

// WithSkip exempts the requests for which skip returns true.
func WithSkip(skip middleware.Skipper) Option { return func(c *config) { c.Skip = skip } }

// WithDenyHandler answers requests over the limit instead of the default
// 429; the headers are set, and ResultFrom gives the decision.
func WithDenyHandler(deny echo.HandlerFunc) Option { return func(c *config) { c.Deny = deny } }

// WithErrorHandler receives the errors the policy reports (Decision.Err)
// instead of the log. If it returns an error or commits a response, that
// stands; otherwise the policy's decision applies.
func WithErrorHandler(onError func(c echo.Context, err error) error) Option {
	return func(c *config) { c.OnError = onError }
}

// New returns the middleware that applies p. It panics if p is nil.
func New(p *policy.Policy, opts ...Option) echo.MiddlewareFunc {
	cfg := native.Configure[config]("echorl.New", p, opts)
	// Built once: echo applies the middleware of Echo.Use to every request
	// anew, so what the function returned below does, it does per request.
	flow := native.Flow[*exchange]{
		Refuse: func(_ *exchange, status int, body []byte) error {
			return &echo.HTTPError{Code: status, Message: problem{status, body}}
		},
		Next: func(x *exchange) (int, error) { err := x.next(x.c); return status(x.c, err), err },
	}
	var onError func(*exchange, error) error
	if cfg.OnError != nil {
		onError = func(x *exchange, err error) error { return cfg.OnError(x.c, err) }
	}
	var deny func(*exchange) error
	if cfg.Deny != nil {
		deny = func(x *exchange) error { return cfg.Deny(x.c) }
	}
	flow.Handlers(onError, committed, deny)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skip != nil && cfg.Skip(c) {
				return next(c)
			}
			x := &exchange{c: c, next: next}
			return flow.Serve(p, x, x)
		}
	}
}

// committed returns a function that reports whether x's response is
// written.
func committed(x *exchange) func() bool { return func() bool { return x.c.Response().Committed } }

// status is the response status of a request whose handler returned err:
// the status written, or the one Echo's error handler will write.
func status(c echo.Context, err error) int {
	if err == nil || c.Response().Committed {
		return c.Response().Status
	}
	if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}

// problem is the Message of the *echo.HTTPError of a refusal: its JSON is
// the RFC 9457 problem object, and it prints as the status text.
type problem struct {
	status int
	body   []byte
}

func (p problem) MarshalJSON() ([]byte, error) { return p.body, nil }
func (p problem) String() string               { return http.StatusText(p.status) }

// ResultFrom returns the decision of the request: in a deny handler, the
// refusal; in the handlers of a request served, the decision with the
// fewest permits left of the policies that limit it (remaining permits,
// reset time), as its X-RateLimit-* headers show. It reports false before
// any policy decided the request.
func ResultFrom(c echo.Context) (core.Result, bool) { return policy.ResultFrom(c.Request().Context()) }

// Key returns a key function that reads the key from the echo.Context, such as
// a path parameter or a value set with c.Set; an empty key means that the request has none.
func Key(f func(echo.Context) (string, error)) keyfunc.KeyFunc { return native.Func("echorl", f) }

// RateFunc returns a rate function that reads the rate from the echo.Context.
func RateFunc(f func(echo.Context) (core.Rate, error)) policy.RateFunc {
	return native.Func("echorl", f)
}

// CostFunc returns a cost function that reads the cost from the echo.Context.
func CostFunc(f func(echo.Context) (int64, error)) policy.CostFunc { return native.Func("echorl", f) }

// exchange is the policy.Exchange of an Echo request.
type exchange struct {
	c             echo.Context
	next          echo.HandlerFunc // the rest of the chain
	headers       native.Headers   // the values of the fields the policy sets
	native.Shared                  // what the request's policies share
}

func (x *exchange) Native() echo.Context           { return x.c }
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
