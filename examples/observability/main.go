// Command observability is an example API limited with nethttprl that
// serves its rate limit metrics to Prometheus on /metrics: a global per-IP
// limit, a login limit, and a search limit running dry (it measures what it
// would deny, and serves everything).
//
// It is a module of its own, so that the redlimit module does not depend on
// the Prometheus client. From the repository's root:
//
//	go run -C examples/observability .
package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/metrics/prometheus"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

func main() {
	client, stop := demo.Client()
	defer stop()

	reg := prom.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := newHandler(client, reg)
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
`, demo.Addr())
	srv := &http.Server{Addr: demo.Addr(), Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// newHandler returns the example's handler: the limited API, and /metrics
// serving what reg gathers, the rate limit metrics included.
func newHandler(client *core.Client, reg *prom.Registry) (http.Handler, error) {
	obs, err := prometheus.New(reg)
	if err != nil {
		return nil, err
	}
	observed, share := policy.WithObserver(obs), policy.WithFailLocal(demo.Instances())
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
