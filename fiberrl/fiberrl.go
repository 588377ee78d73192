// Package fiberrl is Fiber middleware for redlimit: each request takes
// permits from a distributed limiter in Redis, or is rejected with 429, or
// waits for a permit. It is written for Fiber v2
// (github.com/gofiber/fiber/v2, *fiber.Ctx).
//
//	app.Use(fiberrl.New(client, core.PerMinute(100), fiberrl.WithName("global")))
//	app.Post("/login", fiberrl.New(client, core.PerMinute(5), fiberrl.WithName("login")), login)
//
// The behaviour (limiter names, shared budgets, requests without a key,
// wait mode, failure policy, headers) is that of package policy, and the
// options have the same names in ginrl, echorl and nethttprl. A key can be
// read from the *fiber.Ctx with Key, or built with package keyfunc.
//
// A configuration mistake, such as an invalid rate, cost, name, wait or
// timeout, or a name already used with another rate, makes New panic with
// a message naming the option.
//
// Route keys (keyfunc.Route) need the route's template, which Fiber gives
// only to the handlers registered with the route: pass the middleware to
// app.Get or app.Post with the route. In app.Use or a group's middleware,
// keyfunc.Route fails every decision with an error (wrapping
// keyfunc.ErrRouteUnknown) that the error handler logs.
//
// # Request context and wait mode
//
// fasthttp cannot tell that a client went away, and c.Context(), the
// *fasthttp.RequestCtx, carries no per-request deadline. The middleware
// uses c.UserContext() as the request's context instead. By default it has
// no deadline and is never cancelled, so in wait mode a request waits until
// its permit comes or the maximum wait passes, even after its client left.
// An application that sets a context with a deadline or a cancellation
// with c.SetUserContext, in a middleware before this one, bounds the waits.
package fiberrl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config struct {
	policy  []policy.Option
	skip    func(*fiber.Ctx) bool
	deny    fiber.Handler
	onError func(*fiber.Ctx, error) error
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
func WithRates(f func(*fiber.Ctx) (core.Rate, error)) Option {
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
func WithCosts(f func(*fiber.Ctx) (int64, error)) Option {
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

// WithSkip exempts the requests for which skip returns true. Fiber's own
// middlewares call this option Next.
func WithSkip(skip func(*fiber.Ctx) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithDenyHandler answers requests over the limit instead of the default 429
// problem+json response; its error is returned to Fiber. The rate limit
// headers and Retry-After are already set; ResultFrom gives the decision.
func WithDenyHandler(deny fiber.Handler) Option {
	return func(c *config) { c.deny = deny }
}

// WithErrorHandler is called when a decision fails (Redis down or slow under
// WithFailOpen or WithFailClosed, or a key function failed: the default
// local fallback decides without failing), instead of the default, which
// logs. If it answers the request (sets a status or a body, or returns an
// error, which goes to Fiber), that answer stands; otherwise the request is
// served, or answered 503 under WithFailClosed.
func WithErrorHandler(onError func(c *fiber.Ctx, err error) error) Option {
	return func(c *config) { c.onError = onError }
}

// Key returns a key function that reads the key from the *fiber.Ctx, such
// as a path parameter or a value in c.Locals:
//
//	fiberrl.WithKey(fiberrl.Key(func(c *fiber.Ctx) (string, error) { return c.Params("tenant"), nil }))
//
// The key is escaped or hashed before it reaches Redis, and is not kept
// after the request, so it may be one of Fiber's zero-copy strings. An
// empty key means that the request has no key. The function works only in
// this package's middleware.
func Key(f func(*fiber.Ctx) (string, error)) keyfunc.KeyFunc {
	if f == nil {
		panic("fiberrl.Key: nil function")
	}
	return func(r keyfunc.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errForeign
		}
		return f(q.c)
	}
}

var errForeign = errors.New("fiberrl.Key: a key function of fiberrl used outside fiberrl's middleware")

// New returns the middleware limiting requests to rate. It panics when the
// rate or an option is invalid, naming it.
func New(client *core.Client, rate core.Rate, opts ...Option) fiber.Handler {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	p, err := policy.New(client, rate, cfg.policy...)
	if err != nil {
		panic(fmt.Errorf("fiberrl.New: %w", err))
	}
	return func(c *fiber.Ctx) error {
		if cfg.skip != nil && cfg.skip(c) {
			return c.Next()
		}
		d := p.Decide(request{c}, c.Locals(redisFailedKey{}) != nil)
		if d.RedisFailed() {
			c.Locals(redisFailedKey{}, true) // later limits decide without Redis
		}
		p.SetHeaders(header{c}, d)
		if p.Refused(d) {
			c.Locals(refusedKey{}, true) // earlier limits give their grants back
		}
		switch {
		case d.Outcome == policy.Denied && cfg.deny != nil:
			c.Locals(resultKey{}, d.Result)
			return cfg.deny(c)
		case d.Outcome == policy.Failed && cfg.onError != nil:
			status, size := c.Response().StatusCode(), len(c.Response().Body())
			if err := cfg.onError(c, d.Err); err != nil || c.Response().StatusCode() != status || len(c.Response().Body()) != size {
				return err
			}
		case d.Outcome == policy.Failed:
			p.LogError(c.UserContext(), d.Err)
		}
		if status, body := p.Reply(d); status != 0 {
			// The body is copied, not sent with c.Send: it is shared by
			// every request of the policy.
			c.Status(status)
			c.Set(fiber.HeaderContentType, policy.ProblemContentType)
			c.Response().SetBody(body)
			return nil
		}
		err := c.Next()
		if !d.Result.Grant.IsZero() {
			p.Done(c.UserContext(), d, status(c, err), c.Locals(refusedKey{}) != nil)
		}
		return err
	}
}

// status returns the status of the response: the one set, or, when the
// handler returned err for the app's error handler to answer, the one a
// *fiber.Error says (500 for another error).
func status(c *fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// Keys of the request's flags, in c.Locals.
type (
	redisFailedKey struct{} // a limit's Redis round trip failed
	refusedKey     struct{} // a limit refused the request
	resultKey      struct{}
)

// ResultFrom returns the decision of a request denied by the middleware,
// in a deny handler.
func ResultFrom(c *fiber.Ctx) (core.Result, bool) {
	res, ok := c.Locals(resultKey{}).(core.Result)
	return res, ok
}

// header is the policy.HeaderWriter of a Fiber response.
type header struct{ c *fiber.Ctx }

func (h header) Get(key string) string { return h.c.GetRespHeader(key) }
func (h header) Set(key, value string) { h.c.Set(key, value) }

// Add adds a header line. c.Append would merge the values into one line,
// which net/http clients read as one value, and drop some as duplicates.
func (h header) Add(key, value string) { h.c.Response().Header.Add(key, value) }

// request is the keyfunc.Request of a Fiber request. Its strings are
// Fiber's zero-copy views, valid until the handler returns.
type request struct{ c *fiber.Ctx }

var errRouteUnknown = fmt.Errorf("fiberrl: %w in middleware added with app.Use or to a group: "+
	"pass the middleware to the route (app.Get(path, limit, handler)) to key on the route", keyfunc.ErrRouteUnknown)

func (q request) Context() context.Context  { return q.c.UserContext() }
func (q request) Method() string            { return q.c.Method() }
func (q request) Header(name string) string { return q.c.Get(name) }
func (q request) Query(name string) string  { return q.c.Query(name) }
func (q request) RemoteAddr() string        { return q.c.Context().RemoteAddr().String() }
func (q request) Value(key any) any         { return q.c.Locals(key) }

// Route returns the template of the route whose handlers run. In
// middleware added with app.Use or to a group, that is the middleware's
// own entry, which is no route of the request: Fiber marks it in the
// unexported field use of fiber.Route, and says nothing of it otherwise.
func (q request) Route() (string, error) {
	r := q.c.Route()
	if routeUse != nil && reflect.ValueOf(r).Elem().FieldByIndex(routeUse).Bool() {
		return "", errRouteUnknown
	}
	return r.Path, nil
}

// routeUse is the index of fiber.Route's field use, or nil if this
// version of Fiber has none (a test checks that it has).
var routeUse = func() []int {
	f, ok := reflect.TypeFor[fiber.Route]().FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil
	}
	return f.Index
}()

func (q request) HeaderValues(name string) []string {
	lines := q.c.Request().Header.PeekAll(name)
	if len(lines) == 0 {
		return nil
	}
	values := make([]string, len(lines))
	for i, b := range lines {
		values[i] = utils.UnsafeString(b)
	}
	return values
}

// PeerAddr gives keyfunc.IP the peer's address without formatting it.
func (q request) PeerAddr() (netip.Addr, bool) {
	return netip.AddrFromSlice(q.c.Context().RemoteIP())
}
