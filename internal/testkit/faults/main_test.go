package faults_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/faultproxy"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/internal/testkit/stall"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// The tests that time requests run one at a time (not t.Parallel): on a
// 2-core machine shared with other work, load from a parallel test would
// be measured as the library's latency. The tests without timing bounds
// run in parallel, in TestStateLoss.

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopAll()
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines left at the end of the package:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	// timeout is the policy's decision timeout (the default, 100 ms).
	timeout = 100 * time.Millisecond
	// margin is what a request may take beyond the timeout while the test
	// process runs: the timer that ends the round trip fires on a 2-core
	// machine shared with other builds and tests, under the race detector,
	// with the load goroutines, redis-server and GC competing for the CPU;
	// a wakeup late by tens of milliseconds is ordinary there. 150 ms is
	// well above that and far below a hang (go-redis's own read timeout is
	// 3 s).
	margin = 150 * time.Millisecond
	// bound is the longest any request may take during a fault, but for the
	// time the test process could not run meanwhile (see app.ran): a loaded
	// machine stalls it for hundreds of milliseconds at times, which no code
	// can shorten; a request held by the code runs no shorter for it, and
	// the process runs meanwhile.
	bound = timeout + margin
)

// findLeaks reports the goroutines left running, waiting up to 3 s for
// those that end on their own: go-redis's dial prober (pool.tryDial)
// sleeps 1 s between dials and only then sees that its client was closed.
// A Client's ledger writer is no leak: it ends by itself once the grants it
// holds leave their window (a minute here), written or not.
func findLeaks() error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := goleak.Find(ledgerWriter)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var ledgerWriter = goleak.IgnoreAnyFunction("github.com/redlimit/redlimit/core.(*ledger).write")

// noLeaks fails t if goroutines are left running when t's cleanups are
// done. Call it first in a test that does not run in parallel with
// others, so that it runs last.
func noLeaks(t *testing.T) {
	t.Cleanup(func() {
		if err := findLeaks(); err != nil {
			goleak.VerifyNone(t, ledgerWriter) // reports them
		}
	})
}

// startRedis starts a redis-server of the test's own, killed at its end.
func startRedis(t *testing.T, args ...string) *redistest.Server {
	t.Helper()
	redistest.Need(t)
	s, err := redistest.Start(args...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// startProxy starts a fault proxy to addr, closed at the end of the test.
func startProxy(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// newRedis returns a go-redis client closed at the end of the test.
func newRedis(t *testing.T, o *redis.Options) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func newClient(t *testing.T, rdb redis.UniversalClient, opts ...core.Option) *core.Client {
	t.Helper()
	c, err := core.New(rdb, opts...)
	require.NoError(t, err)
	return c
}

// rec is one request through the middleware.
type rec struct {
	key    string
	start  time.Time
	end    time.Time
	status int
	header http.Header
	body   string
	panic  any
}

func (r rec) took() time.Duration { return r.end.Sub(r.start) }

// decided reports whether Redis decided the request: allowed and denied
// responses carry the rate limit headers, failed decisions never do.
func (r rec) decided() bool { return r.header.Get("RateLimit") != "" }

// failure is one call of the error handler.
type failure struct {
	at  time.Time
	err error
}

// app is the middleware (nethttprl: the logic is package policy's, shared
// by every adapter) in front of a handler answering 200 "ok", with every
// request and every error handler call recorded.
type app struct {
	h      http.Handler
	stalls *stall.Monitor // when the test process could not run
	mu     sync.Mutex
	recs   []rec
	errs   []failure
}

func newApp(t *testing.T, c *core.Client, name string, rate core.Rate, opts ...policy.Option) *app {
	a := &app{stalls: stall.Watch(t)}
	onError := nethttprl.WithErrorHandler(func(_ http.ResponseWriter, _ *http.Request, err error) {
		a.mu.Lock()
		a.errs = append(a.errs, failure{time.Now(), err})
		a.mu.Unlock()
	})
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// Fail open unless opts say otherwise: these tests watch the failed
	// decisions, which the default local fallback would decide itself.
	a.h = nethttprl.New(policy.MustNew(c, name, rate, append([]policy.Option{policy.WithFailOpen()}, opts...)...), onError)(ok)
	return a
}

// do sends one request from the client key (an IPv4 address: the default
// key is the client IP) straight to the handler, and records it. A panic
// is recorded, not propagated, so that the test reports it.
func (a *app) do(key string) rec {
	req := httptest.NewRequest(http.MethodGet, "http://svc/", nil)
	req.RemoteAddr = key + ":40000"
	w := httptest.NewRecorder()
	r := rec{key: key, start: time.Now()}
	func() {
		defer func() { r.panic = recover() }()
		a.h.ServeHTTP(w, req)
	}()
	r.end = time.Now()
	r.status, r.header, r.body = w.Code, w.Header(), w.Body.String()
	a.mu.Lock()
	a.recs = append(a.recs, r)
	a.mu.Unlock()
	return r
}

// load runs workers goroutines that each send a request, pause, and go
// on, until the returned stop is called. key names the client of each
// request.
func (a *app) load(workers int, pause time.Duration, key func(worker, i int) string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				a.do(key(w, i))
				time.Sleep(pause)
			}
		})
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// records returns a copy of the requests recorded so far, by start time.
func (a *app) records() []rec {
	a.mu.Lock()
	defer a.mu.Unlock()
	rs := slices.Clone(a.recs)
	slices.SortFunc(rs, func(x, y rec) int { return x.start.Compare(y.start) })
	return rs
}

func (a *app) failures() []failure {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.errs)
}

// count returns the number of requests recorded so far.
func (a *app) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.recs)
}

// waitFor polls cond every 5 ms until it holds or d passes. It is how the
// tests wait for the load to have reached a state, never an assertion.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ip returns a client address unique to (a, b, c).
func ip(a, b, c int) string {
	return fmt.Sprintf("10.%d.%d.%d", a%256, b%256, c%256)
}

// ran returns how long r took while the test process could run: its time
// less the time the process was stalled meanwhile (see package stall).
func (a *app) ran(r rec) time.Duration { return r.took() - a.stalls.During(r.start, r.end) }

// maxTook returns the longest request in rs and how many there are.
func maxTook(rs []rec) (time.Duration, int) {
	var m time.Duration
	for _, r := range rs {
		m = max(m, r.took())
	}
	return m, len(rs)
}

// between returns the requests that started at or after from and ended
// before to.
func between(rs []rec, from, to time.Time) []rec {
	var out []rec
	for _, r := range rs {
		if !r.start.Before(from) && r.end.Before(to) {
			out = append(out, r)
		}
	}
	return out
}
