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
	fiber3 "github.com/gofiber/fiber/v3"
	"github.com/labstack/echo/v4"
	echo5 "github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	promclient "github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echo5rl"
	"github.com/redlimit/redlimit/echorl"
	"github.com/redlimit/redlimit/fiber3rl"
	"github.com/redlimit/redlimit/fiberrl"
	"github.com/redlimit/redlimit/ginrl"
	"github.com/redlimit/redlimit/grpcrl"
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
	// gRPC only: an interceptor that sends the five rate limit fields that
	// redlimit's sends on a grant, and decides nothing: what grpc itself
	// charges for them.
	variantFields   = "the five rate limit fields alone"
	statusMWFailure = http.StatusServiceUnavailable // written by the error handlers below
)

// framework builds one app, with the redlimit middleware when client is not
// nil, and returns its workload: a GET / (for gRPC, a unary call) from a
// peer that cycles over allowedKeys addresses, so every request has its own
// never-limited key; and a function that stops what the app started, or
// nil.
type framework struct {
	name  string
	build func(client *core.Client, timeout time.Duration, callers int, feature string) (op, func())
}

// benchPolicy returns the policy of scenario e's middleware, with what a
// feature variant adds: an observer, a rate chosen per request (always the
// same one), or a refund rule that the answers never match (its
// bookkeeping, with no refund).
func benchPolicy(client *core.Client, timeout time.Duration, feature string, extra ...policy.Option) *policy.Policy {
	opts := append([]policy.Option{policy.WithTimeout(timeout)}, extra...)
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
	{"echo v4", buildEcho},
	{"echo v5", buildEcho5},
	{"fiber v2", buildFiber},
	{"fiber v3", buildFiber3},
	{"gRPC", buildGRPC},
}

// middlewareRate is the limit of scenario e's middleware.
var middlewareRate = core.PerMinute(allowedLimit)

var (
	peers     = peerAddrs()
	peersTCP  = peerTCPAddrs()
	peersGRPC = peerGRPCs()
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

func peerGRPCs() []*peer.Peer {
	s := make([]*peer.Peer, allowedKeys)
	for i := range s {
		s[i] = &peer.Peer{Addr: peersTCP[i]}
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

func buildNetHTTP(client *core.Client, timeout time.Duration, callers int, feature string) (op, func()) {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	if client != nil {
		onError := nethttprl.WithErrorHandler(
			func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(statusMWFailure) })
		h = nethttprl.New(benchPolicy(client, timeout, feature), onError)(h)
	}
	return serveHTTP(h, callers), nil
}

func buildGin(client *core.Client, timeout time.Duration, callers int, feature string) (op, func()) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if client != nil {
		onError := ginrl.WithErrorHandler(
			func(c *gin.Context, _ error) { c.AbortWithStatus(statusMWFailure) })
		r.Use(ginrl.New(benchPolicy(client, timeout, feature), onError))
	}
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	return serveHTTP(r, callers), nil
}

func buildEcho(client *core.Client, timeout time.Duration, callers int, feature string) (op, func()) {
	e := echo.New()
	if client != nil {
		onError := echorl.WithErrorHandler(
			func(c echo.Context, _ error) error { return c.NoContent(statusMWFailure) })
		e.Use(echorl.New(benchPolicy(client, timeout, feature), onError))
	}
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	return serveHTTP(e, callers), nil
}

func buildEcho5(client *core.Client, timeout time.Duration, callers int, feature string) (op, func()) {
	e := echo5.New()
	if client != nil {
		onError := echo5rl.WithErrorHandler(
			func(c *echo5.Context, _ error) error { return c.NoContent(statusMWFailure) })
		e.Use(echo5rl.New(benchPolicy(client, timeout, feature), onError))
	}
	e.GET("/", func(c *echo5.Context) error { return c.String(http.StatusOK, "ok") })
	return serveHTTP(e, callers), nil
}

// buildFiber drives app.Handler() directly with one reused
// fasthttp.RequestCtx per caller: the peer address is set with
// SetRemoteAddr and the response reset before each request. app.Test would
// add a net.Conn pipe, an HTTP serialization and a goroutine per request.
func buildFiber(client *core.Client, timeout time.Duration, callers int, feature string) (op, func()) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if client != nil {
		onError := fiberrl.WithErrorHandler(
			func(c *fiber.Ctx, _ error) error { return c.SendStatus(statusMWFailure) })
		app.Use(fiberrl.New(benchPolicy(client, timeout, feature), onError))
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	return serveFastHTTP(app.Handler(), callers), nil
}

// buildFiber3 is buildFiber on fiber v3.
func buildFiber3(client *core.Client, timeout time.Duration, callers int, feature string) (op, func()) {
	app := fiber3.New()
	if client != nil {
		onError := fiber3rl.WithErrorHandler(
			func(c fiber3.Ctx, _ error) error { return c.SendStatus(statusMWFailure) })
		app.Use(fiber3rl.New(benchPolicy(client, timeout, feature), onError))
	}
	app.Get("/", func(c fiber3.Ctx) error { return c.SendString("ok") })
	return serveFastHTTP(app.Handler(), callers), nil
}

// serveFastHTTP is the workload of a fasthttp handler: one reused
// RequestCtx per caller, its peer address set and its response and user
// values reset before each request, as fasthttp's server resets them.
func serveFastHTTP(handler fasthttp.RequestHandler, callers int) op {
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
		c.ResetUserValues() // as fasthttp's server does between requests
		handler(c)
		return decision(c.Response.StatusCode(), c.Response.Body())
	}
}

// buildGRPC serves grpc's health service (Check) to a client over an
// in-process bufconn connection: one ClientConn that every caller shares,
// as a gRPC client does, and a unary call per request, with its HTTP/2
// framing, its protobuf encoding and a goroutine per call on the server. A
// bufconn peer has no IP address, so one server interceptor, in both the
// bare and the limited app, gives each call the next of allowedKeys peer
// addresses (a shared counter: the server does not know the caller) before
// the redlimit interceptor, which keys by that address as it does by
// default. A Redis failure answers Unavailable (fail closed), which the
// workload counts as an error, as the HTTP workloads count their error
// handlers' 503.
func buildGRPC(client *core.Client, timeout time.Duration, _ int, feature string) (op, func()) {
	var next atomic.Uint64
	withPeer := func(ctx context.Context) context.Context {
		return peer.NewContext(ctx, peersGRPC[next.Add(1)%allowedKeys])
	}
	intercept := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(withPeer(ctx), req)
	}
	switch {
	case feature == variantFields:
		intercept = func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			md := make(metadata.MD, len(grpcFields))
			for i, f := range grpcFields {
				md[f.key] = grpcFieldValues[i : i+1 : i+1]
			}
			_ = grpc.SetHeader(ctx, md)
			return h(withPeer(ctx), req)
		}
	case client != nil:
		p := benchPolicy(client, timeout, feature, policy.WithFailClosed())
		limit := grpcrl.UnaryServerInterceptor(p, grpcrl.WithErrorHandler(func(context.Context, error) {}))
		intercept = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return limit(withPeer(ctx), req, info, h)
		}
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(intercept))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil { // only for invalid options
		panic(err)
	}
	hc := healthpb.NewHealthClient(conn)
	req := &healthpb.HealthCheckRequest{}
	stop := func() {
		_ = conn.Close()
		srv.Stop()
	}
	return func(ctx context.Context, _, _ int) (bool, error) {
		res, err := hc.Check(ctx, req)
		switch {
		case err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING:
			return true, nil
		case status.Code(err) == codes.ResourceExhausted:
			return false, nil
		case err == nil:
			return false, fmt.Errorf("health status %v", res.GetStatus())
		}
		return false, err
	}, stop
}

// grpcFields are the rate limit fields that grpcrl's interceptor sends on
// a grant in scenario e, with values of the same length.
var grpcFields = []struct{ key, value string }{
	{"ratelimit-policy", `"bench-1";q=1000000;w=60`},
	{"ratelimit", `"bench-1";r=999999;t=1`},
	{"x-ratelimit-limit", "1000000"},
	{"x-ratelimit-remaining", "999999"},
	{"x-ratelimit-reset", "1"},
}

// grpcFieldValues are grpcFields' values, which every call's metadata
// shares.
var grpcFieldValues = func() []string {
	v := make([]string, len(grpcFields))
	for i, f := range grpcFields {
		v[i] = f.value
	}
	return v
}()

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
	only    string // the one framework it is measured on, if not every one
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
	return append(vs, variant{name: variantFields, client: func(*redis.Client) (*core.Client, error) { return nil, nil },
		feature: variantFields, single: true, only: "gRPC"})
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
				if (!v.single || n == 1) && (v.only == "" || v.only == fw.name) {
					vs = append(vs, v)
				}
			}
			rs, err := h.inTurns(len(vs), func(i int) (row, error) {
				v := vs[i]
				id := row{Scenario: "e", Case: fw.name, Library: v.name, Callers: n}
				var stop func()
				defer func() {
					if stop != nil {
						stop()
					}
				}()
				return h.point(ctx, id, v.redis, func(_ context.Context, rdb *redis.Client, callers int) (op, error) {
					client, err := v.client(rdb)
					if err != nil {
						return nil, err
					}
					o, s := fw.build(client, v.timeout, callers, v.feature)
					stop = s
					return o, nil
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
