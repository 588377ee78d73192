// Command observability is an example API limited with nethttprl that
// serves its rate limit metrics to Prometheus on /metrics: a global per-IP
// limit, a login limit, and a search limit running dry (it measures what it
// would deny, and serves everything).
//
// It is a module of its own, so that the redlimit module does not depend on
// the Prometheus client. From the repository's root:
//
//	go run -C examples/observability .
//
// It takes its Redis from REDIS_URL (an embedded one when unset), its
// address from ADDR (127.0.0.1:8080), and the number of processes that
// share its limits from INSTANCES (1).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/embedded"
	"github.com/redlimit/redlimit/internal/redisurl"
	"github.com/redlimit/redlimit/metrics/prometheus"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

func main() {
	// Redis is at REDIS_URL, such as redis://user:password@host:6379/0.
	// Without it, the demo starts an embedded Redis in this process; a
	// service would require REDIS_URL instead.
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		addr, stop, err := embedded.Start()
		if err != nil {
			log.Fatalf("embedded Redis: %v", err)
		}
		defer stop()
		redisURL = "redis://" + addr
		log.Print(embedded.Notice)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		// The error may quote the URL, password and all: say what is wrong
		// without it.
		log.Fatalf("REDIS_URL: %v", redisurl.Redact(err, redisURL))
	}
	// Each round trip stops at its decision's deadline (100 ms by default),
	// not at go-redis's 3 s ReadTimeout.
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	log.Printf("using Redis at %s", opts.Addr) // the address alone: the URL may hold a password

	client, err := core.New(rdb, core.WithKeyPrefix("example:"))
	if err != nil {
		log.Fatal(err)
	}
	// Check tells at start what keeps Redis from deciding, if anything. The
	// service starts all the same: its limits decide in memory, at this
	// instance's share, until Redis answers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Check(ctx); err != nil {
		log.Printf("redis check: %v: limiting in memory at this instance's share until Redis answers", err)
	} else {
		log.Printf("redis check: ok")
	}

	// INSTANCES is how many processes share the limits: while Redis cannot
	// decide, each one limits in memory at its share of the rate.
	instances := 1
	if n, err := strconv.Atoi(os.Getenv("INSTANCES")); err == nil && n > 0 {
		instances = n
	}

	reg := prom.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := newHandler(client, reg, instances)
	if err != nil {
		log.Fatal(err)
	}

	srv := newServer(cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080"), h)
	ln, err := net.Listen("tcp", srv.Addr) // bound before the banner says so
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf(`observability example listening on http://%[1]s
  GET  /         10 requests per 10 s per client IP
  POST /login    also 3 per minute per IP
  GET  /search   2 per 10 s per IP, dry run: never refused, measured
  GET  /metrics  Prometheus metrics, not limited
Try: for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code}\n' http://%[1]s/; done
     curl -s http://%[1]s/metrics | grep '^redlimit_'
`, srv.Addr)
	log.Fatal(srv.Serve(ln))
}

// newHandler returns the example's handler: the API, limited by policies on
// client that instances processes share, and /metrics serving what reg
// gathers, the rate limit metrics included.
func newHandler(client *core.Client, reg *prom.Registry, instances int) (http.Handler, error) {
	obs, err := prometheus.New(reg)
	if err != nil {
		return nil, err
	}
	observed, share := policy.WithObserver(obs), policy.WithFailLocal(instances)
	perIP := nethttprl.New(policy.MustNew(client, "global", core.Rate{Permits: 10, Interval: 10 * time.Second}, observed, share))
	login := nethttprl.New(policy.MustNew(client, "login", core.PerMinute(3), observed, share))
	// A new limit goes out in dry run first: its denials are counted as
	// outcome="dry_run_denied", and every request is served.
	search := nethttprl.New(policy.MustNew(client, "search", core.Rate{Permits: 2, Interval: 10 * time.Second},
		policy.WithDryRun(), observed, share))

	api := http.NewServeMux()
	api.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	api.Handle("POST /login", login(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "logged in")
	})))
	api.Handle("GET /search", search(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "no results")
	})))

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", perIP(api))
	return mux, nil
}

// newServer returns the server of h on addr, with the timeouts of a server
// open to clients: without them, a slow or idle client holds its
// connection, and its memory, for as long as it likes.
func newServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:    addr,
		Handler: h,
		// A client has 5 s to send a request's header, 10 s for all of it.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// The answer is written within 15 s of the request's header.
		WriteTimeout: 15 * time.Second,
		// A keep-alive connection is closed after a minute without a request.
		IdleTimeout: time.Minute,
	}
}
