// Package fiber3rl applies redlimit policies (package policy) to Fiber v3
// (github.com/gofiber/fiber/v3) requests; it only translates them.
//
//	app.Use(fiber3rl.New(policy.MustNew(client, "global", core.PerMinute(100))))
//	app.Post("/login", fiber3rl.New(policy.MustNew(client, "login", core.PerMinute(5))), login)
//
// Route keys use the route's template, c.FullPath() ("/users/:id"), once
// the router has matched the request's route (c.Matched()): in middleware
// passed with the route (app.Get(path, limit, handler)), not in app.Use or
// a group's Use. The request's context is c.Context(), which the policy
// replaces with c.SetContext; fasthttp sees no disconnects, so waits end
// only with the maximum wait or a deadline a middleware before this sets.
package fiber3rl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/utils/v2"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/native"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config = native.Config[func(fiber.Ctx) bool, fiber.Handler, func(fiber.Ctx, error) error]

// WithSkip exempts the requests for which skip returns true.
func WithSkip(skip func(fiber.Ctx) bool) Option { return func(c *config) { c.Skip = skip } }

// WithDenyHandler answers requests over the limit instead of the default
// 429; the headers are set, and ResultFrom gives the decision.
func WithDenyHandler(deny fiber.Handler) Option { return func(c *config) { c.Deny = deny } }

// WithErrorHandler receives the errors the policy reports (Decision.Err)
// instead of the log. If it returns an error or sets a status or body,
// that stands; otherwise the policy's decision applies.
func WithErrorHandler(onError func(c fiber.Ctx, err error) error) Option {
	return func(c *config) { c.OnError = onError }
}

// New returns the middleware that applies p. It panics if p is nil.
func New(p *policy.Policy, opts ...Option) fiber.Handler {
	cfg := native.Configure[config]("fiber3rl.New", p, opts)
	flow := native.Flow[fiber.Ctx]{Refuse: refuse, Next: next, Hold: hold}
	flow.Handlers(cfg.OnError, wrote, cfg.Deny)
	return func(c fiber.Ctx) error {
		if cfg.Skip != nil && cfg.Skip(c) {
			return c.Next()
		}
		return flow.Serve(p, &exchange{c: c}, c)
	}
}

// refuse answers a refused request with the policy's status and body.
func refuse(c fiber.Ctx, status int, body []byte) error {
	// Copied, not sent with c.Send: the body is shared.
	c.Status(status).Set(fiber.HeaderContentType, policy.ProblemContentType)
	c.Response().SetBody(body)
	return nil
}

// wrote returns a function that reports whether a status or body was set
// since.
func wrote(c fiber.Ctx) func() bool {
	status, size := c.Response().StatusCode(), len(c.Response().Body())
	return func() bool { return c.Response().StatusCode() != status || len(c.Response().Body()) != size }
}

// next runs the rest of the chain and returns the response's status.
func next(c fiber.Ctx) (int, error) {
	err := c.Next()
	if err == nil {
		return c.Response().StatusCode(), nil
	}
	if fe := (*fiber.Error)(nil); errors.As(err, &fe) {
		return fe.Code, err
	}
	return fiber.StatusInternalServerError, err
}

// hold returns, for a connection the handler hijacked (a WebSocket), what
// ends its decision once fasthttp is done with it; nil for any other.
func hold(c fiber.Ctx) func(done func()) {
	if !c.RequestCtx().Hijacked() {
		return nil
	}
	return native.Closed(c.RequestCtx().SetUserValue)
}

// ResultFrom returns the decision of the request: in a deny handler, the
// refusal; in the handlers of a request served, the decision with the
// fewest permits left of the policies that limit it (remaining permits,
// reset time), as its X-RateLimit-* headers show. It reports false before
// any policy decided the request.
func ResultFrom(c fiber.Ctx) (core.Result, bool) { return policy.ResultFrom(c.Context()) }

// Key returns a key function that reads the key from the fiber.Ctx, such as
// a path parameter or a value in c.Locals; an empty key means that the request has none.
func Key(f func(fiber.Ctx) (string, error)) keyfunc.KeyFunc { return native.Func("fiber3rl", f) }

// RateFunc returns a rate function that reads the rate from the fiber.Ctx.
func RateFunc(f func(fiber.Ctx) (core.Rate, error)) policy.RateFunc {
	return native.Func("fiber3rl", f)
}

// CostFunc returns a cost function that reads the cost from the fiber.Ctx.
func CostFunc(f func(fiber.Ctx) (int64, error)) policy.CostFunc { return native.Func("fiber3rl", f) }

// exchange is the policy.Exchange of a Fiber request. Its strings are
// Fiber's zero-copy views, valid until the handler returns.
type exchange struct {
	c             fiber.Ctx
	native.Shared // what the request's policies share
}

var errRouteUnknown = fmt.Errorf("fiber3rl: %w in middleware added with app.Use or to a group: "+
	"pass the middleware to the route (app.Get(path, limit, handler)) to key on the route", keyfunc.ErrRouteUnknown)

func (x *exchange) Native() fiber.Ctx              { return x.c }
func (x *exchange) Context() context.Context       { return x.c.Context() }
func (x *exchange) SetContext(ctx context.Context) { x.c.SetContext(ctx) }
func (x *exchange) SetHeader(name, value string) {
	if value == "" {
		x.c.Response().Header.Del(name)
		return
	}
	x.c.Set(name, value)
}
func (x *exchange) Header(name string) string { return x.c.Get(name) }
func (x *exchange) Query(name string) string  { return x.c.Query(name) }
func (x *exchange) RemoteAddr() string        { return x.c.RequestCtx().RemoteAddr().String() }

func (x *exchange) RemoteAddrPort() netip.AddrPort {
	return native.AddrPort(x.c.RequestCtx().RemoteAddr())
}

// Route returns the method and template of the route whose handlers run.
// Until the router matches a route, as in app.Use, c.FullPath() is the
// prefix of the Use, not a route, and c.Matched() is false.
func (x *exchange) Route() (string, error) {
	if !x.c.Matched() {
		return "", errRouteUnknown
	}
	return native.Route(x.c.Route().Method, x.c.FullPath()), nil
}

// Value returns c.Locals(key), else the value of the request's context.
func (x *exchange) Value(key any) any {
	if v := x.c.Locals(key); v != nil {
		return v
	}
	return x.c.Context().Value(key)
}

func (x *exchange) HeaderValues(name string) []string {
	lines := x.c.Request().Header.PeekAll(name)
	values := make([]string, len(lines))
	for i, b := range lines {
		values[i] = utils.UnsafeString(b)
	}
	return values
}
