package policy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// This file holds a complete adapter for "tiny", a router of a few lines
// whose handlers take a *tinyCtx and return an error, written on package
// policy as ginrl, echorl, fiberrl and nethttprl are: the adapter, from
// "tinyrl" to the end of its request type, is about 100 lines.

// tinyCtx is the router's context: the request, the matched route and its
// parameters, values set by middleware, and the rest of the chain.
type tinyCtx struct {
	w      http.ResponseWriter
	r      *http.Request
	route  string
	params map[string]string
	values map[string]bool
	status int
	chain  []tinyHandler
}

// WriteHeader sends the status of the response.
func (c *tinyCtx) WriteHeader(status int) { c.status = status; c.w.WriteHeader(status) }

type tinyHandler func(*tinyCtx) error

// Next runs the rest of the chain.
func (c *tinyCtx) Next() error {
	h := c.chain[0]
	c.chain = c.chain[1:]
	return h(c)
}

// --- tinyrl: the adapter ---

// Option configures the middleware.
type Option func(*config)

type config struct {
	policy  []policy.Option
	onError func(*tinyCtx, error)
}

func shared(o policy.Option) Option { return func(c *config) { c.policy = append(c.policy, o) } }

// WithName, WithKey and WithWait are three of the policy's options; the
// others are wrapped the same way.
func WithName(name string) Option            { return shared(policy.WithName(name)) }
func WithKey(keys ...keyfunc.KeyFunc) Option { return shared(policy.WithKey(keys...)) }
func WithWait(maxWait time.Duration) Option  { return shared(policy.WithWait(maxWait)) }

// WithErrorHandler is called when no decision could be made.
func WithErrorHandler(f func(*tinyCtx, error)) Option { return func(c *config) { c.onError = f } }

// Key reads a key from the router's own context.
func Key(f func(*tinyCtx) (string, error)) keyfunc.KeyFunc {
	return func(r keyfunc.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errors.New("tinyrl.Key used outside tinyrl")
		}
		return f(q.c)
	}
}

// New returns the middleware; it panics on an invalid rate or option.
func New(client *core.Client, rate core.Rate, opts ...Option) tinyHandler {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	p, err := policy.New(client, rate, cfg.policy...)
	if err != nil {
		panic(fmt.Errorf("tinyrl.New: %w", err))
	}
	return func(c *tinyCtx) error {
		// The limits of one request tell each other two things: a failed
		// Redis round trip (later ones skip Redis), and a refusal (earlier
		// ones give their grants back, after Next).
		d := p.Decide(request{c}, c.values["redisFailed"])
		c.values["redisFailed"] = c.values["redisFailed"] || d.RedisFailed()
		c.values["refused"] = c.values["refused"] || p.Refused(d)
		p.SetHeaders(c.w.Header(), d)
		if d.Outcome == policy.Failed {
			if cfg.onError != nil {
				cfg.onError(c, d.Err)
			} else {
				p.LogError(c.r.Context(), d.Err)
			}
		}
		if status, body := p.Reply(d); status != 0 {
			c.w.Header().Set("Content-Type", policy.ProblemContentType)
			c.WriteHeader(status)
			_, err := c.w.Write(body)
			return err
		}
		err := c.Next()
		p.Done(c.r.Context(), d, c.status, c.values["refused"])
		return err
	}
}

// request is the keyfunc.Request of a tiny request.
type request struct{ c *tinyCtx }

func (q request) Context() context.Context          { return q.c.r.Context() }
func (q request) Method() string                    { return q.c.r.Method }
func (q request) Route() (string, error)            { return q.c.route, nil }
func (q request) Header(name string) string         { return q.c.r.Header.Get(name) }
func (q request) HeaderValues(name string) []string { return q.c.r.Header.Values(name) }
func (q request) Query(name string) string          { return q.c.r.URL.Query().Get(name) }
func (q request) RemoteAddr() string                { return q.c.r.RemoteAddr }
func (q request) Value(key any) any                 { return q.c.r.Context().Value(key) }

// --- end of tinyrl ---

// serveTiny routes GET /tenants/{id} through handlers.
func serveTiny(handlers ...tinyHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/tenants/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		c := &tinyCtx{w: w, r: r, route: "/tenants/{id}", params: map[string]string{"id": id},
			values: map[string]bool{}, status: http.StatusOK, chain: handlers}
		if err := c.Next(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}

// An adapter for another router, with a key read from the router's own
// context: two requests a minute per tenant.
func Example_adapter() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	if err != nil {
		panic(err)
	}

	tenant := Key(func(c *tinyCtx) (string, error) { return c.params["id"], nil })
	h := serveTiny(
		New(client, core.PerMinute(2), WithName("tenants"), WithKey(tenant)),
		func(c *tinyCtx) error { _, err := fmt.Fprint(c.w, "ok"); return err },
	)
	for _, path := range []string{"/tenants/a", "/tenants/a", "/tenants/a", "/tenants/b"} {
		w := httptest.NewRecorder()
		h(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// /tenants/a 200 "tenants";r=1;t=60
	// /tenants/a 200 "tenants";r=0;t=60
	// /tenants/a 429 "tenants";r=0;t=60
	// /tenants/b 200 "tenants";r=1;t=60
}
