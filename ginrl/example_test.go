package ginrl_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginrl"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// The examples run on an embedded Redis (miniredis), so that they need no
// server; a service gives core.New a go-redis client of its Redis, with
// ContextTimeoutEnabled (see package core).
func exampleClient() (*core.Client, *miniredis.Miniredis) {
	gin.SetMode(gin.TestMode) // no debug lines in the examples' output
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}))
	if err != nil {
		panic(err)
	}
	return client, mr
}

// send sends n requests from 192.0.2.1, with header's name and value pairs,
// and returns their statuses in runs: "5 x 200, 1 x 429".
func send(h http.Handler, method, path string, n int, header ...string) string {
	var runs []string
	last, count := 0, 0
	for i := 0; i <= n; i++ {
		status := 0
		if i < n {
			r := httptest.NewRequest(method, path, nil)
			for j := 0; j+1 < len(header); j += 2 {
				r.Header.Set(header[j], header[j+1])
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			status = w.Code
		}
		if status != last && count > 0 {
			runs = append(runs, fmt.Sprintf("%d x %d", count, last))
			count = 0
		}
		last = status
		count++
	}
	return strings.Join(runs, ", ")
}

// limiterNames returns the names of the limiters in Redis: their config
// hashes.
func limiterNames(mr *miniredis.Miniredis) []string {
	var names []string
	for _, k := range mr.Keys() {
		if !strings.HasPrefix(k, "{") {
			names = append(names, k)
		}
	}
	return names
}

func handleLogin(c *gin.Context) { c.String(http.StatusOK, "logged in") }

func handleHome(c *gin.Context) { c.String(http.StatusOK, "hello") }

// A limit per client IP on every route, and a login limit on top of it that
// may wait up to 3 s for a permit. The sixth login of a minute is refused at
// once, since its permit comes back only a minute after the first; the five
// served logins count against the global limit too, and the refused one
// takes nothing from it.
func Example() {
	client, mr := exampleClient()
	defer mr.Close()

	global := policy.MustNew(client, "global", core.PerMinute(100)) // per client IP
	login := policy.MustNew(client, "login", core.PerMinute(5), policy.WithWait(3*time.Second))

	r := gin.New()
	r.Use(ginrl.New(global))
	r.POST("/login", ginrl.New(login), handleLogin)

	r.GET("/", handleHome)
	fmt.Println("POST /login:", send(r, http.MethodPost, "/login", 6))
	fmt.Println("GET /:", send(r, http.MethodGet, "/", 100))
	// Output:
	// POST /login: 5 x 200, 1 x 429
	// GET /: 95 x 200, 5 x 429
}

// Who is limited: the key functions of package keyfunc, or one that reads
// gin's own context. The policy escapes the key into the limiter's name; a
// key of several parts (keyfunc.Join) has each part escaped by Join, and
// the joined key escaped again by the policy.
func Example_keys() {
	client, mr := exampleClient()
	defer mr.Close()
	secret := []byte("from your secret store")

	// Per user: a value your authentication middleware set (c.Set("user", id)).
	perUser := policy.MustNew(client, "user", core.PerHour(1000), policy.WithKey(keyfunc.User("user")))

	// Per tenant, read from gin's own context.
	tenant := ginrl.Key(func(c *gin.Context) (string, error) { return c.Param("tenant"), nil })
	perTenant := policy.MustNew(client, "tenant", core.PerMinute(600), policy.WithKey(tenant))

	// Per route: the method and the route template ("GET /users/:id"), never the raw path.
	perRoute := policy.MustNew(client, "route", core.PerSecond(50), policy.WithKey(keyfunc.Route()))

	// Per API key: hashed (HMAC-SHA256 with your secret) before it reaches Redis.
	perAPIKey := policy.MustNew(client, "apikey", core.PerMinute(100),
		policy.WithKey(keyfunc.APIKey("X-API-Key", keyfunc.WithSecret(secret))))

	// Per route and user: several parts, joined.
	perRouteUser := policy.MustNew(client, "route-user", core.PerMinute(10),
		policy.WithKey(keyfunc.Route(), keyfunc.User("user")))

	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")) }) // stands in for authentication
	ok := func(c *gin.Context) { c.Status(http.StatusOK) }
	r.GET("/users/:id", ginrl.New(perUser), ginrl.New(perRoute), ginrl.New(perRouteUser), ok)
	r.GET("/tenants/:tenant", ginrl.New(perTenant), ok)
	r.GET("/data", ginrl.New(perAPIKey), ok)

	send(r, http.MethodGet, "/users/42", 1, "X-User", "alice")
	send(r, http.MethodGet, "/tenants/acme", 1)
	send(r, http.MethodGet, "/data", 1, "X-API-Key", "sk_live_abc123")
	for _, name := range limiterNames(mr) {
		fmt.Println(name)
	}
	// Output:
	// apikey:k34f-EhfDHHdn79jsFMnxw
	// route-user:GET%2520%252Fusers%252F%253Aid%3Aalice
	// route:GET%20%2Fusers%2F%3Aid
	// tenant:acme
	// user:alice
}

// Behind a load balancer, the client address is read from X-Forwarded-For,
// but only when the request comes from a trusted proxy: the client is then
// the rightmost address that is not one.
func Example_proxy() {
	client, mr := exampleClient()
	defer mr.Close()

	proxies, err := keyfunc.ParsePrefixes("10.0.0.0/8", "192.168.1.7")
	if err != nil {
		panic(err)
	}
	ip := keyfunc.IP(keyfunc.TrustProxies(proxies...)) // X-Forwarded-For by default
	global := policy.MustNew(client, "global", core.PerMinute(100), policy.WithKey(ip))
	// A policy keyed by user limits requests without a user by their IP:
	// tell it the proxies too.
	perUser := policy.MustNew(client, "user", core.PerHour(1000), policy.WithKey(keyfunc.User("user")),
		policy.WithMissingKeyIP(keyfunc.TrustProxies(proxies...)))

	r := gin.New()
	r.Use(ginrl.New(global), ginrl.New(perUser))
	r.GET("/", handleHome)
	for _, peer := range []string{"10.0.0.1:1234", "192.0.2.1:1234"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = peer
		req.Header.Set("X-Forwarded-For", "198.51.100.9, 203.0.113.7")
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
	for _, name := range limiterNames(mr) {
		fmt.Println(name)
	}
	// Output:
	// global:192.0.2.1
	// global:203.0.113.7
	// user::ip:192.0.2.1
	// user::ip:203.0.113.7
}

// Several limits on one route: a request refused by one of them gives back
// the grants of the limits before it, so it costs them nothing.
func Example_stacked() {
	client, mr := exampleClient()
	defer mr.Close()
	handleSearch := func(c *gin.Context) { c.String(http.StatusOK, "no results") }

	hourly := policy.MustNew(client, "hourly", core.PerHour(300))
	burst := policy.MustNew(client, "burst", core.PerSecond(2))

	r := gin.New()
	r.GET("/search", ginrl.New(hourly), ginrl.New(burst), handleSearch)

	fmt.Println(send(r, http.MethodGet, "/search", 3))
	left, err := client.Limiter("hourly:192.0.2.1").AvailablePermits(context.Background())
	fmt.Println("hourly permits left:", left, err)
	// Output:
	// 2 x 200, 1 x 429
	// hourly permits left: 298 <nil>
}

// A rate per request, such as the user's plan, and a cost per request, such
// as a batch's size.
func Example_plansAndCosts() {
	client, mr := exampleClient()
	defer mr.Close()

	plans := map[string]core.Rate{"free": core.PerHour(100), "pro": core.PerHour(1000)}
	plan := ginrl.RateFunc(func(c *gin.Context) (core.Rate, error) {
		r, ok := plans[c.GetString("plan")]
		if !ok {
			return core.Rate{}, fmt.Errorf("unknown plan %q", c.GetString("plan"))
		}
		return r, nil
	})
	perPlan := policy.MustNew(client, "plan", plans["free"], policy.WithKey(keyfunc.User("user")), policy.WithRateFunc(plan))

	items := ginrl.CostFunc(func(c *gin.Context) (int64, error) { return strconv.ParseInt(c.Query("items"), 10, 64) })
	batch := policy.MustNew(client, "batch", core.PerMinute(1000), policy.WithCostFunc(items))

	r := gin.New()
	r.Use(func(c *gin.Context) { // stands in for authentication
		c.Set("user", c.GetHeader("X-User"))
		c.Set("plan", c.GetHeader("X-Plan"))
	})
	r.GET("/reports", ginrl.New(perPlan), handleHome)
	r.POST("/batch", ginrl.New(batch), handleHome)

	for _, p := range []string{"pro", "free", "gold"} {
		req := httptest.NewRequest(http.MethodGet, "/reports", nil)
		req.Header.Set("X-User", p+"-user")
		req.Header.Set("X-Plan", p)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(p, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	for _, n := range []string{"10", "x", "1001"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/batch?items="+n, nil))
		fmt.Printf("items=%s: %d X-RateLimit-Remaining=%q\n", n, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// pro 200 "plan";q=1000;w=3600
	// free 200 "plan";q=100;w=3600
	// gold 200 "plan";q=100;w=3600
	// items=10: 200 X-RateLimit-Remaining="990"
	// items=x: 400 X-RateLimit-Remaining=""
	// items=1001: 413 X-RateLimit-Remaining=""
}

// Refunds: only failed logins count, and server errors do not count.
func Example_refunds() {
	client, mr := exampleClient()
	defer mr.Close()

	// Only failed logins count (fiber's SkipSuccessfulRequests).
	login := policy.MustNew(client, "login", core.PerMinute(5), policy.WithRefundSuccessful())
	// Server errors do not count.
	api := policy.MustNew(client, "api", core.PerMinute(100), policy.WithRefund(func(status int) bool { return status >= 500 }))

	r := gin.New()
	r.POST("/login", ginrl.New(login), func(c *gin.Context) {
		if c.GetHeader("X-Password") != "secret" {
			c.Status(http.StatusUnauthorized)
			return
		}
		c.Status(http.StatusOK)
	})
	r.GET("/api", ginrl.New(api), func(c *gin.Context) { c.Status(http.StatusInternalServerError) })

	fmt.Println("good logins:", send(r, http.MethodPost, "/login", 7, "X-Password", "secret"))
	fmt.Println("bad logins:", send(r, http.MethodPost, "/login", 6, "X-Password", "guess"))
	fmt.Println("server errors:", send(r, http.MethodGet, "/api", 101))
	// Output:
	// good logins: 7 x 200
	// bad logins: 5 x 401, 1 x 429
	// server errors: 101 x 500
}

// Wait mode: a second login within 2 s waits for its permit, up to 3 s,
// when the permit comes back in time; otherwise it is refused at once.
func Example_wait() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	client, err := core.New(rdb)
	if err != nil {
		panic(err)
	}

	login := policy.MustNew(client, "login", core.Rate{Permits: 1, Interval: 2 * time.Second},
		policy.WithWait(3*time.Second))

	r := gin.New()
	r.POST("/login", ginrl.New(login), handleLogin)
	_ = r.Run("127.0.0.1:8080")
}

// A deny handler answers refused requests in the application's own format;
// ResultFrom gives it the decision. The rate limit headers are already set.
func Example_denyHandler() {
	client, mr := exampleClient()
	defer mr.Close()

	deny := ginrl.WithDenyHandler(func(c *gin.Context) {
		res, _ := ginrl.ResultFrom(c)
		c.JSON(http.StatusTooManyRequests, gin.H{"error": "slow down", "retry_in": res.RetryAfter.Round(time.Second).String()})
	})
	global := policy.MustNew(client, "global", core.PerMinute(1))

	r := gin.New()
	r.Use(ginrl.New(global, deny))
	r.GET("/", handleHome)
	for range 2 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Printf("%d Retry-After=%q %s\n", w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
	// Output:
	// 200 Retry-After="" hello
	// 429 Retry-After="60" {"error":"slow down","retry_in":"1m0s"}
}
