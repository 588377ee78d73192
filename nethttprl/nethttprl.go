// Package nethttprl is net/http middleware for redlimit: each request takes
// permits from a distributed limiter in Redis, or is rejected with 429, or
// waits for a permit. It works with any router built on net/http (ServeMux,
// chi, gorilla/mux).
//
//	limit := nethttprl.New(client, core.PerMinute(100), nethttprl.WithName("global"))
//	http.ListenAndServe(addr, limit(mux))
//
// The behaviour (limiter names, shared budgets, requests without a key,
// wait mode, failure policy, headers) is that of package policy, and the
// options have the same names in ginrl, echorl and fiberrl. A key can be
// read from the *http.Request with Key (a path value, a context value set
// by authentication), or built with package keyfunc.
//
// A configuration mistake, such as an invalid rate, cost, name, wait or
// timeout, or a name already used with another rate, makes New panic with
// a message naming the option.
//
// Route keys (keyfunc.Route) need the ServeMux pattern (r.Pattern), which
// is known only inside the mux: wrap the route's handler, not the mux.
// Wrapping the mux, keyfunc.Route fails every decision with an error
// (wrapping keyfunc.ErrRouteUnknown) that the error handler logs. Routers
// that do not set r.Pattern, such as chi, are read with Key.
package nethttprl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config struct {
	policy  []policy.Option
	skip    func(*http.Request) bool
	deny    http.Handler
	onError func(http.ResponseWriter, *http.Request, error)
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

// WithRates chooses each request's rate from the *http.Request.
func WithRates(f func(*http.Request) (core.Rate, error)) Option {
	return WithRateFunc(func(r keyfunc.Request) (core.Rate, error) {
		q, ok := r.(request)
		if !ok {
			return core.Rate{}, errForeign
		}
		return f(q.r)
	})
}

// WithCostFunc chooses each request's cost; a cost above the rate is
// answered 413.
func WithCostFunc(f func(keyfunc.Request) (int64, error)) Option {
	return shared(policy.WithCostFunc(f))
}

// WithCosts chooses each request's cost from the *http.Request.
func WithCosts(f func(*http.Request) (int64, error)) Option {
	return WithCostFunc(func(r keyfunc.Request) (int64, error) {
		q, ok := r.(request)
		if !ok {
			return 0, errForeign
		}
		return f(q.r)
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
func WithSkip(skip func(*http.Request) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithDenyHandler answers requests over the limit instead of the default 429
// problem+json response. The rate limit headers and Retry-After are already
// set; ResultFrom gives the decision.
func WithDenyHandler(deny http.Handler) Option {
	return func(c *config) { c.deny = deny }
}

// WithErrorHandler is called when a decision fails (Redis down or slow under
// WithFailOpen or WithFailClosed, or a key function failed: the default
// local fallback decides without failing), instead of the default, which
// logs. If it writes a response, that response stands; otherwise the
// request is served, or answered 503 under WithFailClosed.
func WithErrorHandler(onError func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) { c.onError = onError }
}

// Key returns a key function that reads the key from the *http.Request,
// such as a path value, a context value set by authentication, or a
// router's own route pattern:
//
//	nethttprl.WithKey(nethttprl.Key(func(r *http.Request) (string, error) { return r.PathValue("tenant"), nil }))
//
// The key is escaped or hashed before it reaches Redis. An empty key means
// that the request has no key. The function works only in this package's
// middleware.
func Key(f func(*http.Request) (string, error)) keyfunc.KeyFunc {
	if f == nil {
		panic("nethttprl.Key: nil function")
	}
	return func(r keyfunc.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errForeign
		}
		return f(q.r)
	}
}

var errForeign = errors.New("nethttprl.Key: a key function of nethttprl used outside nethttprl's middleware")

// New returns the middleware limiting requests to rate. It panics when the
// rate or an option is invalid, naming it.
func New(client *core.Client, rate core.Rate, opts ...Option) func(http.Handler) http.Handler {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	p, err := policy.New(client, rate, cfg.policy...)
	if err != nil {
		panic(fmt.Errorf("nethttprl.New: %w", err))
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.skip != nil && cfg.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			d := p.Decide(request{r}, r.Context().Value(redisFailedKey{}) != nil)
			if d.RedisFailed() {
				r = r.WithContext(context.WithValue(r.Context(), redisFailedKey{}, true))
			}
			p.SetHeaders(w.Header(), d)
			if p.Refused(d) {
				refuse(w) // the earlier limits of this request give their grants back
			}
			switch {
			case d.Outcome == policy.Denied && cfg.deny != nil:
				cfg.deny.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), resultKey{}, d.Result)))
				return
			case d.Outcome == policy.Failed && cfg.onError != nil:
				rw := &watch{ResponseWriter: w}
				if cfg.onError(rw, r, d.Err); rw.wrote {
					return
				}
			case d.Outcome == policy.Failed:
				p.LogError(r.Context(), d.Err)
			}
			if status, body := p.Reply(d); status != 0 {
				w.Header().Set("Content-Type", policy.ProblemContentType)
				w.WriteHeader(status)
				_, _ = w.Write(body)
				return
			}
			if d.Result.Grant.IsZero() {
				next.ServeHTTP(w, r)
				return
			}
			// A grant may be given back: by a later limit's refusal, or by
			// the response status (WithRefund).
			sw := &writer{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			p.Done(r.Context(), d, sw.status, sw.refused)
		})
	}
}

// redisFailedKey marks a request whose Redis round trip failed in an
// earlier limit: later ones decide without Redis.
type redisFailedKey struct{}

// writer records the status of a response, and whether a later limit of
// the request refused it.
type writer struct {
	http.ResponseWriter
	status  int
	wrote   bool
	refused bool
}

func (w *writer) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refuse marks every writer of this package around w: the limits before
// this one in the request's chain.
func refuse(w http.ResponseWriter) {
	for w != nil {
		if sw, ok := w.(*writer); ok {
			sw.refused = true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

type resultKey struct{}

// ResultFrom returns the decision of a request denied by the middleware,
// in a deny handler.
func ResultFrom(r *http.Request) (core.Result, bool) {
	res, ok := r.Context().Value(resultKey{}).(core.Result)
	return res, ok
}

// watch records whether an error handler wrote a response.
type watch struct {
	http.ResponseWriter
	wrote bool
}

func (w *watch) WriteHeader(code int) { w.wrote = true; w.ResponseWriter.WriteHeader(code) }

func (w *watch) Write(b []byte) (int, error) { w.wrote = true; return w.ResponseWriter.Write(b) }

func (w *watch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// request is the keyfunc.Request of a net/http request.
type request struct{ r *http.Request }

var errRouteUnknown = fmt.Errorf("nethttprl: %w: the request has no ServeMux pattern: "+
	"wrap the route's handler (mux.Handle(pattern, limit(handler))), not the mux, to key on the route", keyfunc.ErrRouteUnknown)

func (q request) Context() context.Context          { return q.r.Context() }
func (q request) Method() string                    { return q.r.Method }
func (q request) Header(name string) string         { return q.r.Header.Get(name) }
func (q request) HeaderValues(name string) []string { return q.r.Header.Values(name) }
func (q request) Query(name string) string          { return q.r.URL.Query().Get(name) }
func (q request) RemoteAddr() string                { return q.r.RemoteAddr }
func (q request) Value(key any) any                 { return q.r.Context().Value(key) }

// Route returns the ServeMux pattern without its method, which
// keyfunc.Route adds itself: "GET /users/{id}" gives "/users/{id}". A
// request that reached a handler of the mux has a pattern, so one without
// is outside the mux.
func (q request) Route() (string, error) {
	pattern := q.r.Pattern
	if pattern == "" {
		return "", errRouteUnknown
	}
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		return strings.TrimLeft(pattern[i+1:], " \t"), nil
	}
	return pattern, nil
}
