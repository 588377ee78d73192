package nethttprl_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// The example runs on an embedded Redis (miniredis), so that it needs no
// server; a service gives core.New a go-redis client of its Redis, with
// ContextTimeoutEnabled (see package core).
func exampleClient() (*core.Client, *miniredis.Miniredis) {
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

// send sends n requests from 192.0.2.1 and returns their statuses in runs:
// "5 x 200, 1 x 429".
func send(h http.Handler, method, path string, n int) string {
	var runs []string
	last, count := 0, 0
	for i := 0; i <= n; i++ {
		status := 0
		if i < n {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
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

func handleLogin(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "logged in") }

func handleHome(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }

// A limit per client IP on every route, and a login limit on top of it that
// may wait up to 3 s for a permit. The sixth login of a minute is refused at
// once, since its permit comes back only a minute after the first; the five
// served logins count against the global limit too, and the refused one
// takes nothing from it. The login limit wraps the route's handler, inside
// the mux, where the route is known.
func Example() {
	client, mr := exampleClient()
	defer mr.Close()

	global := policy.MustNew(client, "global", core.PerMinute(100)) // per client IP
	login := policy.MustNew(client, "login", core.PerMinute(5), policy.WithWait(3*time.Second))

	mux := http.NewServeMux()
	mux.Handle("POST /login", nethttprl.New(login)(http.HandlerFunc(handleLogin)))
	handler := nethttprl.New(global)(mux)

	mux.HandleFunc("GET /{$}", handleHome)
	fmt.Println("POST /login:", send(handler, http.MethodPost, "/login", 6))
	fmt.Println("GET /:", send(handler, http.MethodGet, "/", 100))
	// Output:
	// POST /login: 5 x 200, 1 x 429
	// GET /: 95 x 200, 5 x 429
}

// Under chi, the middleware goes in r.Use for every route, and in r.With
// (or in Use inside r.Group) for some: there chi has routed the request,
// and route keys (keyfunc.Route) see its pattern.
func Example_chi() {
	client, mr := exampleClient()
	defer mr.Close()

	global := policy.MustNew(client, "global", core.PerMinute(100)) // per client IP
	login := policy.MustNew(client, "login", core.PerMinute(5), policy.WithWait(3*time.Second))

	r := chi.NewRouter()
	r.Use(nethttprl.New(global))
	r.With(nethttprl.New(login)).Post("/login", handleLogin)

	r.Get("/", handleHome)
	fmt.Println("POST /login:", send(r, http.MethodPost, "/login", 6))
	fmt.Println("GET /:", send(r, http.MethodGet, "/", 100))
	// Output:
	// POST /login: 5 x 200, 1 x 429
	// GET /: 95 x 200, 5 x 429
}

// counter is an observe.Observer that counts the outcomes of decisions, as
// the metrics modules (metrics/prometheus, metrics/otel) do with labels.
type counter struct {
	mu       sync.Mutex
	outcomes map[observe.Outcome]int
}

func (c *counter) Decision(_ context.Context, d observe.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outcomes == nil {
		c.outcomes = map[observe.Outcome]int{}
	}
	c.outcomes[d.Outcome]++
}

func (c *counter) Fallback(policy string, active bool) {}

func (*counter) Held(string, int64) {}

// A new limit goes out in dry run first: it decides every request against
// Redis, so its budgets and metrics are real, but serves them all; the
// requests it would have refused are counted as dry-run denials, and get
// the rate limit fields but no Retry-After.
func Example_dryRun() {
	client, mr := exampleClient()
	defer mr.Close()
	obs := &counter{}

	search := policy.MustNew(client, "search", core.PerMinute(30), policy.WithDryRun(), policy.WithObserver(obs))
	handler := nethttprl.New(search)(http.HandlerFunc(handleHome))

	fmt.Println(send(handler, http.MethodGet, "/search", 30))
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/search", nil))
	fmt.Printf("31st: %d RateLimit=%q Retry-After=%q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	fmt.Println(observe.Allowed, obs.outcomes[observe.Allowed], observe.DryRunDenied, obs.outcomes[observe.DryRunDenied])
	// Output:
	// 30 x 200
	// 31st: 200 RateLimit="\"search\";r=0;t=60" Retry-After=""
	// allowed 30 dry_run_denied 1
}

// The failure policies, with Redis down: the local fallback (the default)
// limits each process to its share of the rate, fail closed answers 503,
// and fail open serves every request.
func Example_failurePolicies() {
	client, mr := exampleClient()
	ok := http.HandlerFunc(handleHome)

	// Three processes share this limit: while Redis cannot decide, each allows a third of it.
	global := policy.MustNew(client, "global", core.PerMinute(100), policy.WithFailLocal(3))
	// A route where an unlimited request costs more than a refused one.
	pay := policy.MustNew(client, "pay", core.PerMinute(10), policy.WithFailClosed())
	// A route where serving matters more than the limit.
	search := policy.MustNew(client, "search", core.PerMinute(60), policy.WithFailOpen())

	mr.Close() // Redis goes down
	fmt.Println("fail local:", send(nethttprl.New(global)(ok), http.MethodGet, "/", 40))
	fmt.Println("fail closed:", send(nethttprl.New(pay)(ok), http.MethodPost, "/pay", 2))
	fmt.Println("fail open:", send(nethttprl.New(search)(ok), http.MethodGet, "/search", 3))
	// Output:
	// fail local: 34 x 200, 6 x 429
	// fail closed: 2 x 503
	// fail open: 3 x 200
}
