package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	promclient "github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echorl"
	"github.com/redlimit/redlimit/fiberrl"
	"github.com/redlimit/redlimit/ginrl"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/metrics/prometheus"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// Variants of scenario e.
const (
	variantBare   = "bare"
	variantRedis  = "redlimit (Redis)"
	variantMemory = "redlimit (memory core)"
	// The memory core with one more option each: their cost is the
	// difference to variantMemory.
	variantObserver = "redlimit (memory core) + observer (Prometheus)"
	variantRateFunc = "redlimit (memory core) + rate func"
	variantRefund   = "redlimit (memory core) + refund rule"
	statusMWFailure = http.StatusServiceUnavailable // written by the error handlers below
)

// framework builds one app, with the redlimit middleware when client is not
// nil, and returns its workload: a GET / from a peer that cycles over
// allowedKeys addresses, so every request has its own never-limited key.
type framework struct {
	name  string
	build func(client *core.Client, timeout time.Duration, callers int, feature string) op
}

// benchPolicy returns the policy of scenario e's middleware, with what a
// feature variant adds: an observer, a rate chosen per request (always the
// same one), or a refund rule that the answers never match (its
// bookkeeping, with no refund).
func benchPolicy(client *core.Client, timeout time.Duration, feature string) *policy.Policy {
	opts := []policy.Option{policy.WithTimeout(timeout)}
	switch feature {
	case variantObserver:
		obs, err := prometheus.New(promclient.NewRegistry())
		if err != nil {
			panic(err)
		}
		opts = append(opts, policy.WithObserver(obs))
	case variantRateFunc:
		opts = append(opts, policy.WithRateFunc(func(keyfunc.Request) (core.Rate, error) { return middlewareRate, nil }))
	case variantRefund:
		opts = append(opts, policy.WithRefund(func(status int) bool { return status >= 500 }))
	}
	// One name per build: the variants run one after another on one
	// Client, and each starts from an empty budget of its own.
	name := "bench-" + strconv.FormatInt(builds.Add(1), 10)
	return policy.MustNew(client, name, middlewareRate, opts...)
}

var builds atomic.Int64

var frameworks = []framework{
	{"net/http", buildNetHTTP},
	{"gin", buildGin},
	{"echo", buildEcho},
	{"fiber", buildFiber},
}

// middlewareRate is the limit of scenario e's middleware.
var middlewareRate = core.PerMinute(allowedLimit)

var (
	peers    = peerAddrs()
	peersTCP = peerTCPAddrs()
)

func peerAddrs() []string {
	s := make([]string, allowedKeys)
	for i := range s {
		s[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":4242"
	}
	return s
}

func peerTCPAddrs() []net.Addr {
	s := make([]net.Addr, allowedKeys)
	for i := range s {
		s[i] = &net.TCPAddr{IP: net.IPv4(10, 0, byte(i/256), byte(i%256)), Port: 4242}
	}
	return s
}

// serveHTTP is the workload of an http.Handler: one request value per
// caller with its RemoteAddr changed per call, and a new recorder per call.
func serveHTTP(h http.Handler, callers int) op {
	reqs := make([]*http.Request, callers)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/", nil)
	}
	return func(_ context.Context, w, i int) (bool, error) {
		r := reqs[w]
		r.RemoteAddr = peers[(w*allowedKeys/callers+i)%allowedKeys]
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return decision(rec.Code, rec.Body.Bytes())
	}
}

// decision turns a response into a decision: the handler's "ok", a 429, or
// an error for anything else.
func decision(code int, body []byte) (bool, error) {
	switch {
	case code == http.StatusOK && string(body) == "ok":
		return true, nil
	case code == http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("status %d, body %q", code, body)
}

func buildNetHTTP(client *core.Client, timeout time.Duration, callers int, feature string) op {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	if client != nil {
		onError := nethttprl.WithErrorHandler(
			func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(statusMWFailure) })
		h = nethttprl.New(benchPolicy(client, timeout, feature), onError)(h)
	}
	return serveHTTP(h, callers)
}

func buildGin(client *core.Client, timeout time.Duration, callers int, feature string) op {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if client != nil {
		onError := ginrl.WithErrorHandler(
			func(c *gin.Context, _ error) { c.AbortWithStatus(statusMWFailure) })
		r.Use(ginrl.New(benchPolicy(client, timeout, feature), onError))
	}
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	return serveHTTP(r, callers)
}

func buildEcho(client *core.Client, timeout time.Duration, callers int, feature string) op {
	e := echo.New()
	if client != nil {
		onError := echorl.WithErrorHandler(
			func(c echo.Context, _ error) error { return c.NoContent(statusMWFailure) })
		e.Use(echorl.New(benchPolicy(client, timeout, feature), onError))
	}
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	return serveHTTP(e, callers)
}

// buildFiber drives app.Handler() directly with one reused
// fasthttp.RequestCtx per caller: the peer address is set with
// SetRemoteAddr and the response reset before each request. app.Test would
// add a net.Conn pipe, an HTTP serialization and a goroutine per request.
func buildFiber(client *core.Client, timeout time.Duration, callers int, feature string) op {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if client != nil {
		onError := fiberrl.WithErrorHandler(
			func(c *fiber.Ctx, _ error) error { return c.SendStatus(statusMWFailure) })
		app.Use(fiberrl.New(benchPolicy(client, timeout, feature), onError))
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	handler := app.Handler()
	ctxs := make([]*fasthttp.RequestCtx, callers)
	for i := range ctxs {
		ctxs[i] = &fasthttp.RequestCtx{}
		ctxs[i].Request.Header.SetMethod(fasthttp.MethodGet)
		ctxs[i].Request.SetRequestURI("/")
	}
	return func(_ context.Context, w, i int) (bool, error) {
		c := ctxs[w]
		c.SetRemoteAddr(peersTCP[(w*allowedKeys/callers+i)%allowedKeys])
		c.Response.Reset()
		handler(c)
		return decision(c.Response.StatusCode(), c.Response.Body())
	}
}

// names4 are limiter names as the middleware builds them for IPv4 clients:
// the policy name, then the address.
var names4 = names("bench:10.0.", 256)

// variant is one way of serving scenario e's requests: the core client of
// the middleware (nil: no middleware) and whether it uses the run's Redis.
type variant struct {
	name    string
	redis   bool
	timeout time.Duration // the middleware's call timeout
	client  func(rdb *redis.Client) (*core.Client, error)
	feature string // the variant's extra option, or ""
	single  bool   // measured at one caller only
}

// memoryTimeout is the call timeout on the memory core. With no I/O, 64
// callers keep both CPUs busy and the Go scheduler runs each for 10 ms
// slices, so a decision can wait far past the default 100 ms for its turn:
// a timeout there would measure the scheduler, not the middleware. Its
// cost (one context per decision) is the same whatever its length.
const memoryTimeout = 10 * time.Second

// variants returns the variants of scenario e: bare, the middleware on
// Redis, and the middleware on the memory core when newMemoryRedis is set.
func variants() []variant {
	vs := []variant{
		{name: variantBare, client: func(*redis.Client) (*core.Client, error) { return nil, nil }},
		{name: variantRedis, redis: true, timeout: 100 * time.Millisecond, client: func(rdb *redis.Client) (*core.Client, error) { return core.New(rdb) }},
	}
	if newMemoryRedis != nil {
		memory := func(*redis.Client) (*core.Client, error) { return core.New(newMemoryRedis()) }
		vs = append(vs, variant{name: variantMemory, timeout: memoryTimeout, client: memory})
		for _, f := range []string{variantObserver, variantRateFunc, variantRefund} {
			vs = append(vs, variant{name: f, timeout: memoryTimeout, client: memory, feature: f, single: true})
		}
	}
	return vs
}

// coreAlone is the core decision the middleware makes per request, on the
// memory core, without any framework: what scenario e's memory-core
// variant costs apart from the adapter.
const coreAlone = "core decision alone"

// runE is scenario e: each framework in each variant, and the core
// decision alone on the memory core.
func (h *harness) runE(ctx context.Context) ([]row, error) {
	var rows []row
	if newMemoryRedis != nil {
		id := row{Scenario: "e", Case: coreAlone, Library: variantMemory, Callers: 1}
		rs, err := h.inTurns(1, func(int) (row, error) {
			return h.point(ctx, id, false, func(context.Context, *redis.Client, int) (op, error) {
				client, err := core.New(newMemoryRedis())
				if err != nil {
					return nil, err
				}
				// The options the middleware gives every limiter, and a
				// name of the length it builds (the policy name and an
				// IPv4 address).
				opts := []core.LimiterOption{core.WithRate(middlewareRate), core.WithCallTimeout(memoryTimeout)}
				return func(ctx context.Context, w, i int) (bool, error) {
					r, err := client.Limiter(names4[i%len(names4)], opts...).TryAcquire(ctx, 1)
					return r.Allowed, err
				}, nil
			})
		})
		if err != nil {
			return rows, err
		}
		rows = append(rows, rs...)
	}
	for _, fw := range frameworks {
		for _, n := range callerCounts {
			var vs []variant
			for _, v := range variants() {
				if !v.single || n == 1 {
					vs = append(vs, v)
				}
			}
			rs, err := h.inTurns(len(vs), func(i int) (row, error) {
				v := vs[i]
				id := row{Scenario: "e", Case: fw.name, Library: v.name, Callers: n}
				return h.point(ctx, id, v.redis, func(_ context.Context, rdb *redis.Client, callers int) (op, error) {
					client, err := v.client(rdb)
					if err != nil {
						return nil, err
					}
					return fw.build(client, v.timeout, callers, v.feature), nil
				})
			})
			if err != nil {
				return rows, err
			}
			rows = append(rows, rs...)
		}
	}
	return rows, nil
}
