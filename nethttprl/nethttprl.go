// Package nethttprl applies redlimit policies (package policy) to net/http
// requests, with any router built on it (ServeMux, chi, gorilla/mux); it
// only translates them.
//
//	global := nethttprl.New(policy.MustNew(client, "global", core.PerMinute(100)))
//	http.ListenAndServe(addr, global(mux))
//
// Route keys use the request's pattern (r.Pattern), which a ServeMux or chi
// (v5.2.3 on) sets once it has routed the request: wrap the route's handler,
// not the router. The key is the pattern as registered: "GET /users/{id}"
// (HEAD counts with it), or "/users/{id}" without a method, as in chi: one
// key for every method. With chi, limit routes with r.With(limit) or Use
// inside r.Group; Use on a sub-router sees only its mount ("/api/*"). A
// sub-router's route has its full pattern ("/api/items/{id}") from chi
// v5.3.0, only its own part ("/items/{id}") in v5.2.3 to v5.2.5.
package nethttprl

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/native"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures the middleware.
type Option func(*config)

type config = native.Config[func(*http.Request) bool, http.Handler, func(http.ResponseWriter, *http.Request, error)]

// WithSkip exempts the requests for which skip returns true.
func WithSkip(skip func(*http.Request) bool) Option { return func(c *config) { c.Skip = skip } }

// WithDenyHandler answers requests over the limit instead of the default
// 429; the headers are set, and ResultFrom gives the decision.
func WithDenyHandler(deny http.Handler) Option { return func(c *config) { c.Deny = deny } }

// WithErrorHandler receives the errors the policy reports (Decision.Err)
// instead of the log. If it writes a response, that stands; otherwise the
// policy's decision applies.
func WithErrorHandler(onError func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) { c.OnError = onError }
}

// New returns the middleware that applies p. It panics if p is nil.
func New(p *policy.Policy, opts ...Option) func(http.Handler) http.Handler {
	cfg := native.Configure[config]("nethttprl.New", p, opts)
	return func(next http.Handler) http.Handler {
		flow := native.Flow[*exchange]{
			Refuse: func(x *exchange, status int, body []byte) error {
				x.w.Header().Set("Content-Type", policy.ProblemContentType)
				x.w.WriteHeader(status)
				_, _ = x.w.Write(body)
				return nil
			},
			Next: func(x *exchange) (int, error) {
				x.sw = writer{ResponseWriter: x.w}
				next.ServeHTTP(&x.sw, x.r)
				return max(x.sw.status, http.StatusOK), nil
			},
		}
		if cfg.OnError != nil {
			flow.OnError = func(x *exchange, err error) (bool, error) {
				sw := &writer{ResponseWriter: x.w}
				cfg.OnError(sw, x.r, err)
				return sw.status != 0, nil
			}
		}
		if cfg.Deny != nil {
			flow.Deny = func(x *exchange) error {
				cfg.Deny.ServeHTTP(x.w, x.r)
				return nil
			}
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.Skip != nil && cfg.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			x := &exchange{w: w, r: r}
			_ = flow.Serve(p, x, x)
		})
	}
}

// writer records the status of a response.
type writer struct {
	http.ResponseWriter
	status int // 0 until written
}

func (w *writer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(b []byte) (int, error) {
	w.status = max(w.status, http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush is for handlers that look for http.Flusher.
func (w *writer) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack hands the connection over to the handler (a WebSocket upgrade).
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ResultFrom returns the decision of the request: in a deny handler, the
// refusal; in the handlers of a request served, the decision with the
// fewest permits left of the policies that limit it (remaining permits,
// reset time), as its X-RateLimit-* headers show. It reports false before
// any policy decided the request.
func ResultFrom(r *http.Request) (core.Result, bool) { return policy.ResultFrom(r.Context()) }

// Key returns a key function that reads the key from the *http.Request, such as
// a path value or a context value; an empty key means that the request has none.
func Key(f func(*http.Request) (string, error)) keyfunc.KeyFunc { return native.Func("nethttprl", f) }

// RateFunc returns a rate function that reads the rate from the *http.Request.
func RateFunc(f func(*http.Request) (core.Rate, error)) policy.RateFunc {
	return native.Func("nethttprl", f)
}

// CostFunc returns a cost function that reads the cost from the *http.Request.
func CostFunc(f func(*http.Request) (int64, error)) policy.CostFunc {
	return native.Func("nethttprl", f)
}

// exchange is the policy.Exchange of a net/http request, and what the
// middleware keeps of it.
type exchange struct {
	w             http.ResponseWriter
	r             *http.Request
	sw            writer         // the response's writer, for the next handler
	headers       native.Headers // the values of the fields the policy sets
	native.Shared                // what the request's policies share
}

var errRouteUnknown = fmt.Errorf("nethttprl: %w: the request has no pattern: "+
	"wrap the route's handler (mux.Handle(pattern, limit(handler))), not the mux, to key on the route", keyfunc.ErrRouteUnknown)

func (x *exchange) Native() *http.Request             { return x.r }
func (x *exchange) Context() context.Context          { return x.r.Context() }
func (x *exchange) SetContext(ctx context.Context)    { x.r = x.r.WithContext(ctx) }
func (x *exchange) SetHeader(name, value string)      { x.headers.Set(x.w.Header(), name, value) }
func (x *exchange) Header(name string) string         { return x.r.Header.Get(name) }
func (x *exchange) HeaderValues(name string) []string { return x.r.Header.Values(name) }
func (x *exchange) Query(name string) string          { return x.r.URL.Query().Get(name) }
func (x *exchange) RemoteAddr() string                { return x.r.RemoteAddr }
func (x *exchange) Value(key any) any                 { return x.r.Context().Value(key) }

// Route returns the request's pattern, as the mux registered it: with its
// method, "GET /users/{id}" (a HEAD request matches it too), or without,
// "/users/{id}", for a route of every method.
func (x *exchange) Route() (string, error) {
	if x.r.Pattern == "" {
		return "", errRouteUnknown
	}
	return x.r.Pattern, nil
}
