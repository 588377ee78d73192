// Command outage shows what a Redis outage does to rate limiting under each
// failure policy. On a redis-server of its own, it runs the net/http
// middleware twice side by side, once failing open and once with the
// default local fallback, each in front of one abusive client and a few
// well-behaved ones; it kills Redis partway through, restarts it empty, and
// writes the share of requests denied and served, per time bucket, to
// outage.md and outage.svg:
//
//	go run ./outage [-duration 16s] [-down-at 5s] [-down-for 5s] [-bucket 250ms] [-out results]
//
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/benchmarks/internal/host"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// The workload: the limit, and the clients of each middleware.
var (
	limit   = core.PerSecond(5)
	clients = []client{
		{name: "abuser", abusive: true, every: 20 * time.Millisecond}, // 50 per second
		{name: "good-1", every: 250 * time.Millisecond},               // 4 per second each
		{name: "good-2", every: 250 * time.Millisecond},
		{name: "good-3", every: 250 * time.Millisecond},
		{name: "good-4", every: 250 * time.Millisecond},
	}
)

// policies are the failure policies compared, each run by a middleware of
// its own on the same Redis at the same time.
var policies = []failurePolicy{
	{name: "fail open", option: policy.WithFailOpen(), color: "#1f77b4"},
	{name: "fail local (default)", option: policy.WithFailLocal(1), color: "#d62728"},
}

type failurePolicy struct {
	name   string
	option policy.Option
	color  string
}

// client sends a request every so often, with its name in X-Client: the
// middleware's key.
type client struct {
	name    string
	abusive bool
	every   time.Duration
}

// config is the run's timeline.
type config struct {
	duration, downAt, downFor, bucket time.Duration
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 16*time.Second, "length of the run")
	flag.DurationVar(&cfg.downAt, "down-at", 5*time.Second, "when Redis is killed, from the start")
	flag.DurationVar(&cfg.downFor, "down-for", 5*time.Second, "how long Redis stays down before it is restarted, empty")
	flag.DurationVar(&cfg.bucket, "bucket", 250*time.Millisecond, "time bucket of the table and the chart")
	out := flag.String("out", "results", "directory of outage.md and outage.svg")
	flag.Parse()
	if cfg.bucket <= 0 || cfg.downAt <= 0 || cfg.downFor <= 0 || cfg.downAt+cfg.downFor >= cfg.duration {
		log.Fatal("want 0 < -down-at, 0 < -down-for, -down-at + -down-for < -duration, 0 < -bucket")
	}
	r, err := measure(cfg)
	if err == nil {
		err = write(r, *out)
	}
	if err != nil {
		log.Printf("outage: %v", err)
		os.Exit(1)
	}
}

// run is what one run observed. Times are since its start.
type run struct {
	cfg          config
	env          string
	downAt, upAt time.Duration // Redis killed; Redis restarted and answering
	samples      []sample
	events       []event
}

// sample is one request and its answer.
type sample struct {
	policy  int // index in policies
	abusive bool
	at      time.Duration // sent
	status  int           // 0 when no response came
	latency time.Duration
}

// event is what the middleware told its observer.
type event struct {
	policy   int
	at       time.Duration
	outcome  observe.Outcome
	fallback bool // a change of the local fallback, not a decision
	active   bool // the fallback's new state
}

// measure starts Redis and the middlewares, runs the clients, takes Redis
// down and back up on the timeline, and returns what happened.
func measure(cfg config) (*run, error) {
	srv, err := redistest.Start() // persistence off: restarted, it is empty
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	info, err := admin.InfoMap(context.Background(), "server").Result()
	_ = admin.Close()
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, env: fmt.Sprintf("%s, %s/%s, %d CPUs, %s, redis-server %s; 1-minute load average %s at the start",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), host.CPUModel(), info["Server"]["redis_version"], host.LoadAverage())}
	log.Printf("redis-server %s on %s; %v run, Redis down from %v for %v",
		info["Server"]["redis_version"], srv.Addr, cfg.duration, cfg.downAt, cfg.downFor)
	quiet := &redisLog{}
	redis.SetLogger(quiet)

	var mu sync.Mutex // guards r.samples and r.events
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }
	var servers []*httptest.Server
	for i, p := range policies {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		c, err := core.New(rdb, core.WithKeyPrefix(fmt.Sprintf("outage%d:", i)))
		if err != nil {
			return nil, err
		}
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			return nil, err
		}
		api := policy.MustNew(c, "api", limit, p.option,
			policy.WithKey(keyfunc.Header("X-Client")),
			policy.WithObserver(&recorder{policy: i, since: since, mu: &mu, events: &r.events}))
		// The observer counts the errors; the default handler would log
		// them.
		limited := nethttprl.New(api, nethttprl.WithErrorHandler(func(http.ResponseWriter, *http.Request, error) {}))
		s := httptest.NewServer(limited(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok\n")
		})))
		defer s.Close()
		servers = append(servers, s)
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer hc.CloseIdleConnections()

	start = time.Now()
	var wg sync.WaitGroup
	for i, s := range servers {
		for j, cl := range clients {
			wg.Go(func() {
				// Each client starts at its own offset, and keeps to its
				// schedule however long its requests take.
				for at := time.Duration(j) * 7 * time.Millisecond; at < cfg.duration; at += cl.every {
					time.Sleep(time.Until(start.Add(at)))
					wg.Go(func() {
						x := send(hc, s.URL, cl.name)
						x.policy, x.abusive, x.at = i, cl.abusive, at
						mu.Lock()
						r.samples = append(r.samples, x)
						mu.Unlock()
					})
				}
			})
		}
	}

	time.Sleep(time.Until(start.Add(cfg.downAt)))
	err = srv.Stop()
	r.downAt = since()
	log.Printf("%.2fs: redis-server killed", r.downAt.Seconds())
	time.Sleep(time.Until(start.Add(cfg.downAt + cfg.downFor)))
	if rerr := srv.Restart(); rerr != nil {
		err = errors.Join(err, rerr)
	}
	r.upAt = since()
	log.Printf("%.2fs: redis-server restarted, empty", r.upAt.Seconds())
	wg.Wait()
	log.Printf("%.2fs: done: %d requests", since().Seconds(), len(r.samples))
	if n := quiet.lines.Load(); n > 0 {
		log.Printf("go-redis logged %d lines, such as: %s", n, quiet.first.Load())
	}
	return r, err
}

// redisLog counts go-redis's own log lines (a failed dial, each time one
// is tried while Redis is down) instead of printing them, and keeps the
// first.
type redisLog struct {
	lines atomic.Int64
	first atomic.Value // string
}

func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	if l.lines.Add(1) == 1 {
		l.first.Store(fmt.Sprintf(format, v...))
	}
}

// send makes one request as client name, and times it.
func send(hc *http.Client, url, name string) sample {
	req, err := http.NewRequest(http.MethodGet, url+"/", nil)
	if err != nil {
		return sample{}
	}
	req.Header.Set("X-Client", name)
	t := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return sample{latency: time.Since(t)}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return sample{status: resp.StatusCode, latency: time.Since(t)}
}

// recorder is the observer of one middleware: it notes every decision's
// outcome and every change of the local fallback, with its time.
type recorder struct {
	policy int
	since  func() time.Duration
	mu     *sync.Mutex
	events *[]event
}

func (o *recorder) Decision(_ context.Context, d observe.Decision) {
	o.add(event{policy: o.policy, at: o.since(), outcome: d.Outcome})
}

func (o *recorder) Fallback(_ string, active bool) {
	o.add(event{policy: o.policy, at: o.since(), fallback: true, active: active})
}

func (*recorder) Held(string, int64) {}

func (o *recorder) add(e event) {
	o.mu.Lock()
	*o.events = append(*o.events, e)
	o.mu.Unlock()
}

// write writes outage.md and outage.svg into dir, and the markdown to
// stdout.
func write(r *run, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md, svg strings.Builder
	r.writeMarkdown(&md)
	r.writeSVG(&svg)
	if err := os.WriteFile(filepath.Join(dir, "outage.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "outage.svg"), []byte(svg.String()), 0o644); err != nil {
		return err
	}
	_, err := os.Stdout.WriteString(md.String())
	return err
}
