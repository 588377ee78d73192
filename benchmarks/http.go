package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululehttp "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"github.com/valyala/fasthttp"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiberrl"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// Scenario h: the same tiny handler behind each library's own middleware,
// served on loopback and driven by a load client over keep-alive
// connections. Every middleware keys requests by one header, which the
// client sets, and uses the run's go-redis client (one pool for all).
const (
	httpKeys   = 1_000      // clients of the many-keys case, each seen once before the run
	httpHeader = "X-Client" // the key of every middleware
	httpHotKey = "hot"      // the one client of the hot-key case
	// httpPolicy is the name of redlimit's policy.
	httpPolicy = "h"

	// The cases: the key of each request.
	caseManyKeys = "many keys, allowed"
	caseHotKey   = "hot key, over its limit"

	// The middleware of each stack, as the results name them.
	mwBare         = "bare (no middleware)"
	mwRedlimit     = "redlimit"
	mwUlule        = "ulule/limiter"
	mwHTTPRate     = "httprate + httprate-redis"
	mwFiberLimiter = "fiber limiter + storage/redis"
)

var (
	// httpConnections are the client's connections (and its goroutines):
	// throughput at 64, latency at 1.
	httpConnections = []int{1, 64}
	httpCases       = []string{caseManyKeys, caseHotKey}
	httpClientKeys  = names("c", httpKeys)
)

// httpKeyOf spreads connections over the clients of the many-keys case:
// each starts at its own offset and goes round robin.
func httpKeyOf(worker, conns, i int) string {
	return httpClientKeys[(worker*httpKeys/conns+i)%httpKeys]
}

// httpStack is a server framework, the load client that drives it, and the
// middleware compared on it.
type httpStack struct {
	name   string
	client string // the load client, as the report names it
	// dial returns a load client of conns connections to addr.
	dial func(addr string, conns int) loadClient
	mws  []httpMiddleware
}

// httpMiddleware is one library's middleware on a stack: start serves the
// handler behind it, at limit requests per minute per key, on rdb, and
// returns the server's address and a function that stops it.
type httpMiddleware struct {
	name  string
	redis bool // false for the bare server
	start func(rdb *redis.Client, limit int64) (addr string, stop func(), err error)
}

// loadClient sends requests over a fixed number of keep-alive
// connections. send is called by one goroutine per connection at a time.
type loadClient interface {
	// send sends GET / as client key from connection w and turns the
	// response into a decision.
	send(w int, key string) (bool, error)
	close()
}

var httpStacks = []httpStack{
	{
		name: "net/http", client: "net/http (Transport, keep-alive)", dial: dialNetHTTP,
		mws: []httpMiddleware{
			{mwBare, false, serveNetHTTP(bareNetHTTP)},
			{mwRedlimit, true, serveNetHTTP(redlimitNetHTTP)},
			{mwUlule, true, serveNetHTTP(ululeNetHTTP)},
			{mwHTTPRate, true, serveNetHTTP(httprateNetHTTP)},
		},
	},
	{
		name: "fiber v2", client: "fasthttp (HostClient, keep-alive)", dial: dialFastHTTP,
		mws: []httpMiddleware{
			{mwBare, false, serveFiber(bareFiber)},
			{mwRedlimit, true, serveFiber(redlimitFiber)},
			{mwFiberLimiter, true, serveFiber(limiterFiber)},
		},
	},
}

// httpCase is the case name of a stack's key case in the results.
func httpCase(stack, kc string) string { return stack + ", " + kc }

// The handler behind every middleware.
func okHandler(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }
func okFiber(c *fiber.Ctx) error                       { return c.SendString("ok") }

// serveNetHTTP starts an http.Server on loopback with the handler behind
// the middleware that mw builds.
func serveNetHTTP(mw func(rdb *redis.Client, limit int64) (func(http.Handler) http.Handler, error)) func(*redis.Client, int64) (string, func(), error) {
	return func(rdb *redis.Client, limit int64) (string, func(), error) {
		wrap, err := mw(rdb, limit)
		if err != nil {
			return "", nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		srv := &http.Server{Handler: wrap(http.HandlerFunc(okHandler)), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		return ln.Addr().String(), func() { _ = srv.Close() }, nil
	}
}

func bareNetHTTP(*redis.Client, int64) (func(http.Handler) http.Handler, error) {
	return func(h http.Handler) http.Handler { return h }, nil
}

// failed answers a middleware's error: the load client counts a 503 as an
// error, not a decision.
func failed(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(statusMWFailure) }

// redlimitNetHTTP is nethttprl with a policy keyed by the header, its
// defaults otherwise.
func redlimitNetHTTP(rdb *redis.Client, limit int64) (func(http.Handler) http.Handler, error) {
	p, err := httpRedlimitPolicy(rdb, limit)
	if err != nil {
		return nil, err
	}
	return nethttprl.New(p, nethttprl.WithErrorHandler(failed)), nil
}

func httpRedlimitPolicy(rdb *redis.Client, limit int64) (*policy.Policy, error) {
	client, err := core.New(rdb)
	if err != nil {
		return nil, err
	}
	return policy.New(client, httpPolicy, core.PerMinute(limit), policy.WithKey(keyfunc.Header(httpHeader)))
}

// ululeNetHTTP is ulule/limiter's net/http middleware on its Redis store.
func ululeNetHTTP(rdb *redis.Client, limit int64) (func(http.Handler) http.Handler, error) {
	store, err := ululeredis.NewStore(rdb) // loads its scripts: one round trip now
	if err != nil {
		return nil, err
	}
	m := ululehttp.NewMiddleware(ulule.New(store, ulule.Rate{Period: window, Limit: limit}),
		ululehttp.WithKeyGetter(func(r *http.Request) string { return r.Header.Get(httpHeader) }),
		ululehttp.WithErrorHandler(failed)) // the default panics
	return m.Handler, nil
}

// httprateNetHTTP is go-chi/httprate's middleware on httprate-redis's
// counter, its fallback to a local counter off so that errors show.
func httprateNetHTTP(rdb *redis.Client, limit int64) (func(http.Handler) http.Handler, error) {
	return httprate.LimitBy(int(limit), window,
		func(r *http.Request) (string, error) { return r.Header.Get(httpHeader), nil },
		httprateredis.WithRedisLimitCounter(&httprateredis.Config{Client: rdb, FallbackDisabled: true}),
		httprate.WithErrorHandler(failed)), nil
}

// serveFiber starts a fiber v2 app on loopback with the handler behind the
// middleware that mw builds (none when it returns nil).
func serveFiber(mw func(rdb *redis.Client, limit int64) (fiber.Handler, error)) func(*redis.Client, int64) (string, func(), error) {
	return func(rdb *redis.Client, limit int64) (string, func(), error) {
		h, err := mw(rdb, limit)
		if err != nil {
			return "", nil, err
		}
		app := fiber.New(fiber.Config{DisableStartupMessage: true, IdleTimeout: 10 * time.Second})
		if h != nil {
			app.Use(h)
		}
		app.Get("/", okFiber)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		go func() { _ = app.Listener(ln) }()
		return ln.Addr().String(), func() { _ = app.ShutdownWithTimeout(time.Second) }, nil
	}
}

func bareFiber(*redis.Client, int64) (fiber.Handler, error) { return nil, nil }

// redlimitFiber is fiberrl with the policy of redlimitNetHTTP.
func redlimitFiber(rdb *redis.Client, limit int64) (fiber.Handler, error) {
	p, err := httpRedlimitPolicy(rdb, limit)
	if err != nil {
		return nil, err
	}
	return fiberrl.New(p, fiberrl.WithErrorHandler(func(c *fiber.Ctx, _ error) error { return c.SendStatus(statusMWFailure) })), nil
}

// limiterFiber is fiber v2's own limiter middleware on gofiber/storage's
// Redis storage, built on the run's client. It keeps its fixed window as
// one value per key, read (GET) and written (SET) back under a mutex of the
// middleware's: its requests never overlap. It ignores storage errors (a
// failed read counts as a new key), so none can show here.
func limiterFiber(rdb *redis.Client, limit int64) (fiber.Handler, error) {
	return fiberlimiter.New(fiberlimiter.Config{
		Max:          int(limit),
		Expiration:   window,
		KeyGenerator: func(c *fiber.Ctx) string { return c.Get(httpHeader) },
		Storage:      fiberredis.NewFromConnection(rdb),
	}), nil
}

// netHTTPClient is a net/http client with one connection per goroutine,
// and a request and a response buffer per connection.
type netHTTPClient struct {
	c    *http.Client
	tr   *http.Transport
	reqs []*http.Request
	bufs []bytes.Buffer
}

func dialNetHTTP(addr string, conns int) loadClient {
	tr := &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		DisableCompression: true, IdleConnTimeout: time.Minute,
	}
	c := &netHTTPClient{c: &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr: tr,
		reqs: make([]*http.Request, conns), bufs: make([]bytes.Buffer, conns)}
	for i := range c.reqs {
		r, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			panic(err) // a bad address of our own
		}
		c.reqs[i] = r
	}
	return c
}

func (c *netHTTPClient) send(w int, key string) (bool, error) {
	r, buf := c.reqs[w], &c.bufs[w]
	r.Header.Set(httpHeader, key)
	resp, err := c.c.Do(r)
	if err != nil {
		return false, err
	}
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return false, err
	}
	return decision(resp.StatusCode, buf.Bytes())
}

func (c *netHTTPClient) close() { c.tr.CloseIdleConnections() }

// fastHTTPClient is a fasthttp client with one connection per goroutine,
// and a request and a response per connection.
type fastHTTPClient struct {
	c     *fasthttp.HostClient
	reqs  []fasthttp.Request
	resps []fasthttp.Response
}

func dialFastHTTP(addr string, conns int) loadClient {
	c := &fastHTTPClient{c: &fasthttp.HostClient{Addr: addr, MaxConns: conns, MaxIdleConnDuration: time.Minute},
		reqs: make([]fasthttp.Request, conns), resps: make([]fasthttp.Response, conns)}
	for i := range c.reqs {
		c.reqs[i].SetRequestURI("http://" + addr + "/")
		c.reqs[i].Header.SetMethod(fasthttp.MethodGet)
	}
	return c
}

func (c *fastHTTPClient) send(w int, key string) (bool, error) {
	req, resp := &c.reqs[w], &c.resps[w]
	req.Header.Set(httpHeader, key)
	resp.Reset()
	if err := c.c.DoTimeout(req, resp, 10*time.Second); err != nil {
		return false, err
	}
	return decision(resp.StatusCode(), resp.Body())
}

func (c *fastHTTPClient) close() { c.c.CloseIdleConnections() }

// prepare readies a server for a run of case kc: in the many-keys case
// every client makes one request (the steady state of returning clients,
// as in scenario a); in the hot-key case the hot client makes hotLimit
// requests, using its limit up. Each from conns goroutines at most.
func prepare(c loadClient, kc string, conns int) error {
	if kc == caseHotKey {
		for range hotLimit {
			if _, err := c.send(0, httpHotKey); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range conns {
		wg.Go(func() {
			for i := w; i < httpKeys; i += conns {
				if _, err := c.send(w, httpClientKeys[i]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runH is scenario h: on each stack, each key case and number of
// connections, the middleware in turns.
func (h *harness) runH(ctx context.Context) ([]row, error) {
	var rows []row
	for _, st := range httpStacks {
		for _, kc := range httpCases {
			var mws []httpMiddleware
			for _, mw := range st.mws {
				if mw.redis || kc == caseManyKeys { // the bare server has no key: measured once
					mws = append(mws, mw)
				}
			}
			limit := int64(allowedLimit)
			if kc == caseHotKey {
				limit = hotLimit
			}
			for _, conns := range httpConnections {
				rs, err := h.inTurns(len(mws), func(i int) (row, error) {
					mw := mws[i]
					id := row{Scenario: "h", Case: httpCase(st.name, kc), Library: mw.name, Callers: conns}
					var stop func()
					defer func() {
						if stop != nil {
							stop()
						}
					}()
					return h.point(ctx, id, mw.redis, func(_ context.Context, rdb *redis.Client, conns int) (op, error) {
						addr, stopServer, err := mw.start(rdb, limit)
						if err != nil {
							return nil, err
						}
						c := st.dial(addr, conns)
						stop = func() {
							c.close()
							stopServer()
						}
						if err := prepare(c, kc, conns); err != nil {
							return nil, fmt.Errorf("prepare: %w", err)
						}
						if kc == caseHotKey {
							return func(_ context.Context, w, _ int) (bool, error) { return c.send(w, httpHotKey) }, nil
						}
						return func(_ context.Context, w, i int) (bool, error) { return c.send(w, httpKeyOf(w, conns, i)) }, nil
					})
				})
				if err != nil {
					return rows, err
				}
				rows = append(rows, rs...)
			}
		}
	}
	return rows, nil
}

// httpConns is "1 connection" or "n connections".
func httpConns(n int) string {
	if n == 1 {
		return "1 connection"
	}
	return strconv.Itoa(n) + " connections"
}
