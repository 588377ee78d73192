package policy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// This file holds a complete adapter for "tiny", a router of a few lines
// whose handlers take a *tinyCtx and return an error, written on package
// policy as ginrl, echorl, fiberrl and nethttprl are: the adapter, from
// "tinyrl" to the end of its exchange, is about 60 lines.

// tinyCtx is the router's context: the request, the matched route and its
// parameters, and the rest of the chain.
type tinyCtx struct {
	w      http.ResponseWriter
	r      *http.Request
	route  string
	params map[string]string
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

type config struct{ onError func(*tinyCtx, error) }

// WithErrorHandler receives the errors the policy reports.
func WithErrorHandler(f func(*tinyCtx, error)) Option { return func(c *config) { c.onError = f } }

// Key reads a key from the router's own context.
func Key(f func(*tinyCtx) (string, error)) keyfunc.KeyFunc {
	return func(r keyfunc.Request) (string, error) {
		x, ok := r.(exchange)
		if !ok {
			return "", errors.New("tinyrl.Key used outside tinyrl")
		}
		return f(x.c)
	}
}

// New returns the middleware that applies p.
func New(p *policy.Policy, opts ...Option) tinyHandler {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return func(c *tinyCtx) error {
		d := p.Decide(exchange{c})
		switch {
		case d.Err != nil && cfg.onError != nil:
			cfg.onError(c, d.Err)
		case d.Err != nil:
			p.LogError(c.r.Context(), d.Err)
		}
		if d.Status != 0 {
			c.w.Header().Set("Content-Type", policy.ProblemContentType)
			c.WriteHeader(d.Status)
			_, err := c.w.Write(d.Body)
			return err
		}
		err := c.Next()
		d.Done(c.status)
		return err
	}
}

// exchange is the policy.Exchange of a tiny request.
type exchange struct{ c *tinyCtx }

func (x exchange) Context() context.Context       { return x.c.r.Context() }
func (x exchange) SetContext(ctx context.Context) { x.c.r = x.c.r.WithContext(ctx) }
func (x exchange) SetHeader(name, value string) {
	if value == "" {
		x.c.w.Header().Del(name)
		return
	}
	x.c.w.Header()[name] = []string{value}
}
func (x exchange) Route() (string, error)            { return x.c.route, nil }
func (x exchange) Header(name string) string         { return x.c.r.Header.Get(name) }
func (x exchange) HeaderValues(name string) []string { return x.c.r.Header.Values(name) }
func (x exchange) Query(name string) string          { return x.c.r.URL.Query().Get(name) }
func (x exchange) RemoteAddr() string                { return x.c.r.RemoteAddr }
func (x exchange) Value(key any) any                 { return x.c.r.Context().Value(key) }

// --- end of tinyrl ---

// serveTiny routes GET /tenants/{id} through handlers.
func serveTiny(handlers ...tinyHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/tenants/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		c := &tinyCtx{w: w, r: r, route: "GET /tenants/{id}", params: map[string]string{"id": id},
			status: http.StatusOK, chain: handlers}
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
		New(policy.MustNew(client, "tenants", core.PerMinute(2), policy.WithKey(tenant))),
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
