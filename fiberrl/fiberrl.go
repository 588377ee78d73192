// Package fiberrl applies redlimit policies (package policy) to Fiber v2
// (github.com/gofiber/fiber/v2) requests; it only translates them.
//
//	app.Use(fiberrl.New(policy.MustNew(client, "global", core.PerMinute(100))))
//	app.Post("/login", fiberrl.New(policy.MustNew(client, "login", core.PerMinute(5))), login)
//
// Fiber gives the route's template only to handlers registered with the
// route (app.Get(path, limit, handler)), not in app.Use. The request's
// context is c.UserContext(); fasthttp sees no disconnects, so waits end
// only with the maximum wait or a deadline a middleware before this sets.
package fiberrl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/native"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config = native.Config[func(*fiber.Ctx) bool, fiber.Handler, func(*fiber.Ctx, error) error]

// WithSkip exempts the requests for which skip returns true.
func WithSkip(skip func(*fiber.Ctx) bool) Option { return func(c *config) { c.Skip = skip } }

// WithDenyHandler answers requests over the limit instead of the default
// 429; the headers are set, and ResultFrom gives the decision.
func WithDenyHandler(deny fiber.Handler) Option { return func(c *config) { c.Deny = deny } }

// WithErrorHandler receives the errors the policy reports (Decision.Err)
// instead of the log. If it returns an error or sets a status or body,
// that stands; otherwise the policy's decision applies.
func WithErrorHandler(onError func(c *fiber.Ctx, err error) error) Option {
	return func(c *config) { c.OnError = onError }
}

// New returns the middleware that applies p. It panics if p is nil.
func New(p *policy.Policy, opts ...Option) fiber.Handler {
	cfg := native.Configure[config]("fiberrl.New", p, opts)
	flow := native.Flow[*fiber.Ctx]{Refuse: refuse, Next: next, Hold: hold}
	flow.Handlers(cfg.OnError, wrote, cfg.Deny)
	return func(c *fiber.Ctx) error {
		if cfg.Skip != nil && cfg.Skip(c) {
			return c.Next()
		}
		return flow.Serve(p, exchange{c}, c)
	}
}

// refuse answers a refused request with the policy's status and body.
func refuse(c *fiber.Ctx, status int, body []byte) error {
	// Copied, not sent with c.Send: the body is shared.
	c.Status(status).Set(fiber.HeaderContentType, policy.ProblemContentType)
	c.Response().SetBody(body)
	return nil
}

// wrote returns a function that reports whether a status or body was set
// since.
func wrote(c *fiber.Ctx) func() bool {
	status, size := c.Response().StatusCode(), len(c.Response().Body())
	return func() bool { return c.Response().StatusCode() != status || len(c.Response().Body()) != size }
}

// next runs the rest of the chain and returns the response's status.
func next(c *fiber.Ctx) (int, error) {
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
func hold(c *fiber.Ctx) func(done func()) {
	if !c.Context().Hijacked() {
		return nil
	}
	return native.Closed(c.Context().SetUserValue)
}

// ResultFrom returns the decision of the request: in a deny handler, the
// refusal; in the handlers of a request served, the decision with the
// fewest permits left of the policies that limit it (remaining permits,
// reset time), as its X-RateLimit-* headers show. It reports false before
// any policy decided the request.
func ResultFrom(c *fiber.Ctx) (core.Result, bool) { return policy.ResultFrom(c.UserContext()) }

// Key returns a key function that reads the key from the *fiber.Ctx, such as
// a path parameter or a value in c.Locals; an empty key means that the request has none.
func Key(f func(*fiber.Ctx) (string, error)) keyfunc.KeyFunc { return native.Func("fiberrl", f) }

// RateFunc returns a rate function that reads the rate from the *fiber.Ctx.
func RateFunc(f func(*fiber.Ctx) (core.Rate, error)) policy.RateFunc {
	return native.Func("fiberrl", f)
}

// CostFunc returns a cost function that reads the cost from the *fiber.Ctx.
func CostFunc(f func(*fiber.Ctx) (int64, error)) policy.CostFunc { return native.Func("fiberrl", f) }

// exchange is the policy.Exchange of a Fiber request. Its strings are
// Fiber's zero-copy views, valid until the handler returns.
type exchange struct{ c *fiber.Ctx }

var errRouteUnknown = fmt.Errorf("fiberrl: %w in middleware added with app.Use or to a group: "+
	"pass the middleware to the route (app.Get(path, limit, handler)) to key on the route", keyfunc.ErrRouteUnknown)

func (x exchange) Native() *fiber.Ctx             { return x.c }
func (x exchange) Context() context.Context       { return x.c.UserContext() }
func (x exchange) SetContext(ctx context.Context) { x.c.SetUserContext(ctx) }
func (x exchange) SetHeader(name, value string) {
	if value == "" {
		x.c.Response().Header.Del(name)
		return
	}
	x.c.Set(name, value)
}
func (x exchange) Header(name string) string { return x.c.Get(name) }
func (x exchange) Query(name string) string  { return x.c.Query(name) }
func (x exchange) RemoteAddr() string        { return x.c.Context().RemoteAddr().String() }

func (x exchange) RemoteAddrPort() netip.AddrPort { return native.AddrPort(x.c.Context().RemoteAddr()) }
func (x exchange) Value(key any) any              { return x.c.Locals(key) }

// Route returns the method and template of the route whose handlers run
// (app.Get's route answers HEAD too, as the route "HEAD /path"), unless
// they were added with app.Use, which Fiber v2 marks only in fiber.Route's
// unexported field use.
func (x exchange) Route() (string, error) {
	r := x.c.Route()
	if routeUse != nil && reflect.ValueOf(r).Elem().FieldByIndex(routeUse).Bool() {
		return "", errRouteUnknown
	}
	return native.Route(r.Method, r.Path), nil
}

// routeUse is the index of fiber.Route's field use, or nil if this version
// of Fiber has none (a test checks that it has).
var routeUse = func() []int {
	f, ok := reflect.TypeFor[fiber.Route]().FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil
	}
	return f.Index
}()

func (x exchange) HeaderValues(name string) []string {
	lines := x.c.Request().Header.PeekAll(name)
	values := make([]string, len(lines))
	for i, b := range lines {
		values[i] = utils.UnsafeString(b)
	}
	return values
}
