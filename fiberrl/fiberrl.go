// Package fiberrl is Fiber middleware for redlimit: each request takes
// permits from a distributed limiter in Redis, or is rejected with 429, or
// waits for a permit. It is written for Fiber v2
// (github.com/gofiber/fiber/v2, *fiber.Ctx).
//
//	app.Use(fiberrl.New(client, core.PerMinute(100)))
//	app.Post("/login", fiberrl.New(client, core.PerMinute(5), fiberrl.WithName("login")), login)
//
// The behaviour (limiter names, wait mode, failure policy, headers) is that
// of package policy, and the options have the same names in ginrl, echorl
// and nethttprl. Route keys (keyfunc.Route) need the route's template,
// which Fiber gives only to the handlers registered with the route: pass
// the middleware to app.Get or app.Post with the route, not to app.Use.
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
	"net/netip"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

type handlers struct {
	skip    func(*fiber.Ctx) bool
	deny    fiber.Handler
	onError func(*fiber.Ctx, error) error
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
// (when the exact wait fits) instead of being rejected at once. See the
// package documentation for what bounds a wait under Fiber.
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

// WithSkip exempts the requests for which skip returns true. Fiber's own
// middlewares call this option Next.
func WithSkip(skip func(*fiber.Ctx) bool) Option {
	return func(_ *policy.Settings, h *handlers) { h.skip = skip }
}

// WithDenyHandler answers requests over the limit instead of the default 429
// problem+json response; its error is returned to Fiber. The rate limit
// headers and Retry-After are already set; ResultFrom gives the decision.
func WithDenyHandler(deny fiber.Handler) Option {
	return func(_ *policy.Settings, h *handlers) { h.deny = deny }
}

// WithErrorHandler is called when no decision could be made (Redis down or
// slow, no key for the request), instead of the default, which logs. If it
// answers the request (sets a status or a body, or returns an error, which
// goes to Fiber), that answer stands; otherwise the failure policy applies:
// serve (fail open) or 503 (fail closed).
func WithErrorHandler(onError func(c *fiber.Ctx, err error) error) Option {
	return func(_ *policy.Settings, h *handlers) { h.onError = onError }
}

// New returns the middleware limiting requests to rate. Invalid options
// make every request fail with 500, and the error is passed to the error
// handler: a misconfigured limiter is loud, never silently off.
func New(client *core.Client, rate core.Rate, opts ...Option) fiber.Handler {
	s, h := policy.Apply(opts)
	p, err := policy.New(client, rate, s)
	return func(c *fiber.Ctx) error {
		if err != nil {
			if handled, herr := h.fail(c, nil, err); handled {
				return herr
			}
			return c.SendStatus(fiber.StatusInternalServerError)
		}
		if h.skip != nil && h.skip(c) {
			return c.Next()
		}
		d := p.Decide(request{c})
		p.SetHeaders(header{c}, d)
		switch d.Outcome {
		case policy.Allowed:
			return c.Next()
		case policy.Denied:
			if h.deny != nil {
				c.Locals(resultKey{}, d.Result)
				return h.deny(c)
			}
			return problem(c, fiber.StatusTooManyRequests, p.DenyBody())
		default: // policy.Failed
			if handled, herr := h.fail(c, p, d.Err); handled {
				return herr
			}
			if p.FailClosed() {
				return problem(c, fiber.StatusServiceUnavailable, p.UnavailableBody())
			}
			return c.Next()
		}
	}
}

// fail passes err to the error handler, or logs it, and reports whether
// the handler answered the request: it returned an error, or set a status
// or a body.
func (h *handlers) fail(c *fiber.Ctx, p *policy.Policy, err error) (bool, error) {
	if h.onError == nil {
		p.LogError(c.UserContext(), err)
		return false, nil
	}
	status, size := c.Response().StatusCode(), len(c.Response().Body())
	herr := h.onError(c, err)
	return herr != nil || c.Response().StatusCode() != status || len(c.Response().Body()) != size, herr
}

// problem writes a problem+json response. The body is copied, not sent
// with c.Send, as it is shared by all requests of the policy.
func problem(c *fiber.Ctx, status int, body []byte) error {
	c.Status(status)
	c.Set(fiber.HeaderContentType, policy.ProblemContentType)
	c.Response().SetBody(body)
	return nil
}

type resultKey struct{}

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

func (q request) Context() context.Context  { return q.c.UserContext() }
func (q request) Method() string            { return q.c.Method() }
func (q request) Route() string             { return q.c.Route().Path }
func (q request) Path() string              { return q.c.Path() }
func (q request) Header(name string) string { return q.c.Get(name) }
func (q request) Query(name string) string  { return q.c.Query(name) }
func (q request) RemoteAddr() string        { return q.c.Context().RemoteAddr().String() }
func (q request) Value(key any) any         { return q.c.Locals(key) }

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
