package conformance

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// holds are the requests an App's handler holds (HeaderHold), per group:
// how many are in flight now, the most at once, and what releases them.
type holds struct {
	mu      sync.Mutex
	now     map[string]int
	most    map[string]int
	release map[string]chan struct{}
}

func newHolds() *holds {
	return &holds{now: map[string]int{}, most: map[string]int{}, release: map[string]chan struct{}{}}
}

// hold counts a request in flight in group g until the group is released,
// for d if not 0, or until ctx ends.
func (h *holds) hold(ctx context.Context, g string, d time.Duration) {
	h.mu.Lock()
	h.now[g]++
	h.most[g] = max(h.most[g], h.now[g])
	rel := h.releaseOf(g)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.now[g]--
		h.mu.Unlock()
	}()
	var timeout <-chan time.Time
	if d > 0 {
		timeout = time.After(d)
	}
	select {
	case <-rel:
	case <-timeout:
	case <-ctx.Done():
	}
}

// releaseOf returns the channel that releases g, under h.mu.
func (h *holds) releaseOf(g string) chan struct{} {
	if h.release[g] == nil {
		h.release[g] = make(chan struct{})
	}
	return h.release[g]
}

// free releases the requests of g held now.
func (h *holds) free(g string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.releaseOf(g))
	h.release[g] = nil
}

// inFlight returns the requests of g in flight now, and the most at once.
func (h *holds) inFlight(g string) (now, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now[g], h.most[g]
}

// waitInFlight waits until n requests of g are held.
func (h *holds) waitInFlight(t *testing.T, g string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { now, _ := h.inFlight(g); return now == n }, 10*time.Second, 5*time.Millisecond,
		"%d requests of %s held", n, g)
}

// background performs a request in a goroutine; its status arrives on the
// channel returned.
func (c caller) background(path string, header ...string) <-chan int {
	out := make(chan int, 1)
	go func() { out <- c.get(path, header...).status }()
	return out
}

// statusesOf collects n statuses from chans.
func statusesOf(t *testing.T, chans ...<-chan int) []int {
	t.Helper()
	var out []int
	for _, ch := range chans {
		select {
		case s := <-ch:
			out = append(out, s)
		case <-time.After(20 * time.Second):
			t.Fatal("a request did not end")
		}
	}
	return out
}

type appFunc func(t *testing.T, global []Limit, routes ...Route) (App, caller)

type failingFunc func(t *testing.T, n int, l Limit) (App, caller, outage)

// runConcurrency is the table's part for concurrency limits.
func runConcurrency(t *testing.T, a Adapter, b backend, app appFunc, failing failingFunc) {
	user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
	// twin serves ap again on a Client of its own, as another process
	// would: the same Redis and key prefix, the same handler counts.
	twin := func(t *testing.T, ap App) caller {
		c, err := core.New(b.rdb, core.WithKeyPrefix(ap.Prefix))
		require.NoError(t, err)
		ap.Client, ap.built = c, &built{}
		return caller{t: t, do: a.Serve(t, ap)}
	}

	t.Run("concurrency: at most the limit in flight per key, across processes", func(t *testing.T) {
		t.Parallel()
		obs := &Recorder{}
		l := Limit{Name: "inflight", Concurrency: 3, Keys: user, Observer: obs}
		ap, c1 := app(t, nil, Route{Path: "/a", Limits: []Limit{l}})
		c2 := twin(t, ap)
		procs := []caller{c1, c2}
		var held []<-chan int
		for i := range 3 {
			held = append(held, procs[i%2].background("/a", HeaderUser, "alice", HeaderHold, "alice"))
		}
		ap.holds.waitInFlight(t, "alice", 3)
		for _, c := range procs {
			r := c.get("/a", HeaderUser, "alice")
			require.Equal(t, http.StatusTooManyRequests, r.status)
			assert.Equal(t, `"inflight";q=3;qu="concurrent-requests"`, r.header.Get("RateLimit-Policy"))
			assert.Equal(t, `"inflight";r=0`, r.header.Get("RateLimit"))
			assert.Equal(t, "3", r.header.Get("X-RateLimit-Limit"))
			assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
			assert.Empty(t, r.header.Get("Retry-After"), "when a slot frees is not known")
			assert.Empty(t, r.header.Get("X-RateLimit-Reset"))
			assert.Equal(t, a.ProblemContentType, r.header.Get("Content-Type"))
			assert.Contains(t, r.body, "quota-exceeded")
		}
		r := c2.get("/a", HeaderUser, "bob")
		assert.Equal(t, http.StatusOK, r.status, "keys do not share slots")
		assert.Equal(t, `"inflight";r=2`, r.header.Get("RateLimit"))
		ap.holds.free("alice")
		assert.Equal(t, []int{200, 200, 200}, statusesOf(t, held...))
		assert.Equal(t, http.StatusOK, c1.get("/a", HeaderUser, "alice").status, "the slots came back")

		// Many at once, through both processes, each held a moment.
		var all []<-chan int
		for i := range 40 {
			all = append(all, procs[i%2].background("/a", HeaderUser, "carol", HeaderHold, "carol", HeaderHoldMs, "30"))
		}
		n := map[int]int{}
		for _, s := range statusesOf(t, all...) {
			n[s]++
		}
		_, most := ap.holds.inFlight("carol")
		t.Logf("40 requests at once: %v; at most %d in flight", n, most)
		assert.LessOrEqual(t, most, 3, "never more in flight than the limit")
		assert.GreaterOrEqual(t, n[http.StatusOK], 3)
		assert.Equal(t, 40, n[http.StatusOK]+n[http.StatusTooManyRequests], "%v", n)
		require.Eventually(t, func() bool { return obs.HeldNow() == 0 }, 5*time.Second, 10*time.Millisecond, "every slot given back")
	})

	t.Run("concurrency: a refusal stacked after a rate carries its own headers", func(t *testing.T) {
		t.Parallel()
		ap, c := app(t, []Limit{{Name: "rate", Rate: core.PerMinute(100)}}, Route{Path: "/a", Limits: []Limit{{Name: "one", Concurrency: 1}}})
		first := c.background("/a", HeaderHold, "one")
		ap.holds.waitInFlight(t, "one", 1)
		r := c.get("/a")
		require.Equal(t, http.StatusTooManyRequests, r.status)
		assert.Equal(t, `"rate";q=100;w=60, "one";q=1;qu="concurrent-requests"`, r.header.Get("RateLimit-Policy"))
		assert.Regexp(t, `^"rate";r=9\d;t=\d+, "one";r=0$`, r.header.Get("RateLimit"))
		assert.Equal(t, "1", r.header.Get("X-RateLimit-Limit"), "the headline is the refusal")
		assert.Empty(t, r.header.Get("X-RateLimit-Reset"), "the rate's reset is not the refusal's")
		assert.Empty(t, r.header.Get("Retry-After"))
		ap.holds.free("one")
		assert.Equal(t, []int{200}, statusesOf(t, first))
	})

	t.Run("concurrency: a handler that panics gives its slot back", func(t *testing.T) {
		t.Parallel()
		_, c := oneLimit(app, t, Limit{Name: "panics", Concurrency: 1})
		r := c.get("/a", HeaderPanic, "1")
		assert.Contains(t, []int{-1, http.StatusInternalServerError}, r.status, "the framework's answer to a panic")
		for range 3 {
			assert.Equal(t, http.StatusOK, c.get("/a").status, "the slot came back")
		}
	})

	t.Run("concurrency: wait mode serves every request in turn", func(t *testing.T) {
		t.Parallel()
		obs := &Recorder{}
		ap, c := oneLimit(app, t, Limit{Name: "turns", Concurrency: 2, MaxWait: 20 * time.Second, Observer: obs})
		var all []<-chan int
		for range 8 {
			all = append(all, c.background("/a", HeaderHold, "turns", HeaderHoldMs, "100"))
		}
		assert.Equal(t, repeat(http.StatusOK, 8), statusesOf(t, all...))
		_, most := ap.holds.inFlight("turns")
		assert.LessOrEqual(t, most, 2, "never more in flight than the limit")
		assert.GreaterOrEqual(t, obs.Count(observe.WaitedAllowed), 1)
	})

	t.Run("concurrency: dry run serves and reports", func(t *testing.T) {
		t.Parallel()
		obs := &Recorder{}
		ap, c := oneLimit(app, t, Limit{Name: "dry", Concurrency: 1, DryRun: true, Observer: obs})
		first := c.background("/a", HeaderHold, "dry")
		ap.holds.waitInFlight(t, "dry", 1)
		r := c.get("/a")
		assert.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, `"dry";r=0`, r.header.Get("RateLimit"))
		assert.Equal(t, 1, obs.Count(observe.DryRunDenied))
		ap.holds.free("dry")
		assert.Equal(t, []int{200}, statusesOf(t, first))
		require.Eventually(t, func() bool { return obs.HeldNow() == 0 }, 5*time.Second, 10*time.Millisecond)
	})

	// Not parallel: the failing Redis of n 0 is its own while it runs.
	t.Run("concurrency with Redis stopped: the process's share, held again in Redis when it is back", func(t *testing.T) {
		obs := &Recorder{}
		l := Limit{Name: "down", Concurrency: 4, Failure: FailLocal, Instances: 2, Observer: obs, Lease: 3 * time.Second}
		ap, c, s := failing(t, 0, l)
		semName := "down:" + keyfunc.Escape(a.Peer.String())
		sem := ap.Client.Semaphore(semName, core.WithPermits(4))
		available := func() int64 {
			n, err := sem.Available(context.Background())
			if err != nil {
				return -1
			}
			return n
		}
		var held []<-chan int
		held = append(held, c.background("/a", HeaderHold, "down"))
		ap.holds.waitInFlight(t, "down", 1)
		require.NoError(t, s.Stop())
		// This process's share is 2 slots, one of them held already.
		held = append(held, c.background("/a", HeaderHold, "down"))
		ap.holds.waitInFlight(t, "down", 2)
		r := c.get("/a")
		assert.Equal(t, http.StatusTooManyRequests, r.status, "past the share")
		assert.Equal(t, 1, obs.Count(observe.FallbackAllowed))
		assert.Equal(t, 1, obs.Count(observe.FallbackDenied))
		require.NoError(t, s.Restart()) // empty
		require.Eventually(t, func() bool { return available() == 2 }, 10*time.Second, 20*time.Millisecond,
			"the 2 slots held are registered in the Redis restarted empty")
		time.Sleep(2 * time.Second) // the other processes' time to register theirs
		for range 2 {
			held = append(held, c.background("/a", HeaderHold, "down"))
		}
		ap.holds.waitInFlight(t, "down", 4)
		assert.Equal(t, http.StatusTooManyRequests, c.get("/a").status, "the limit holds")
		for _, k := range semaphoreKeys(ap.Prefix + semName) {
			ttl, err := ap.Client.Redis().PTTL(context.Background(), k).Result()
			require.NoError(t, err)
			assert.Positive(t, ttl, "%s expires", k)
		}
		ap.holds.free("down")
		assert.Equal(t, repeat(http.StatusOK, 4), statusesOf(t, held...))
		require.Eventually(t, func() bool { return available() == 4 && obs.HeldNow() == 0 }, 10*time.Second, 20*time.Millisecond,
			"every slot given back")
		assert.Equal(t, []bool{true, false}, obs.Transitions())

		for name, f := range map[string]Failure{"downopen": FailOpen, "downclosed": FailClosed} {
			_, c, s := failing(t, 0, Limit{Name: name, Concurrency: 1, Failure: f})
			require.NoError(t, s.Stop())
			want := map[Failure]int{FailOpen: http.StatusOK, FailClosed: http.StatusServiceUnavailable}[f]
			assert.Equal(t, []int{want, want}, c.statuses(2, "/a"), name)
			require.NoError(t, s.Restart())
		}
	})
}

// oneLimit serves a single route "/a" behind one global limit l.
func oneLimit(app appFunc, t *testing.T, l Limit) (App, caller) {
	return app(t, []Limit{l}, Route{Path: "/a"})
}

// semaphoreKeys returns the keys of the semaphore named name (key prefix
// included): its counter and its leases.
func semaphoreKeys(name string) []string {
	if strings.IndexByte(name, '{') >= 0 {
		return []string{name, name + ":timeout"}
	}
	return []string{name, "{" + name + "}:timeout"}
}

// RunWebSocket checks that a WebSocket connection holds its slot of a
// concurrency limit until it closes, and gives it back then, also with two
// limits stacked on its route. serve serves, on a listener of its own, a
// route limited by p and then q (two middlewares) whose handler upgrades
// the request to a WebSocket that echoes what it reads until the client
// closes it, and returns its URL ("ws://127.0.0.1:port/ws").
func RunWebSocket(t *testing.T, serve func(t *testing.T, p, q *policy.Policy) string) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	c, err := core.New(rdb, core.WithKeyPrefix(t.Name()+":"))
	require.NoError(t, err)
	obs := &Recorder{}
	p := policy.MustNewConcurrency(c, "ws", 2, policy.WithObserver(obs), policy.WithLease(time.Second))
	// q never refuses here (p does first); its slots must come back too.
	q := policy.MustNewConcurrency(c, "ws-2", 3, policy.WithObserver(obs), policy.WithLease(time.Second))
	url := serve(t, p, q)
	dial := func() (*websocket.Conn, int) {
		conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
		if resp != nil {
			_ = resp.Body.Close()
		}
		if err != nil {
			if resp == nil {
				t.Fatalf("dial %s: %v", url, err)
			}
			return nil, resp.StatusCode
		}
		return conn, resp.StatusCode
	}
	echo := func(conn *websocket.Conn) {
		t.Helper()
		require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("ping")))
		_, msg, err := conn.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, "ping", string(msg))
	}
	a, status := dial()
	require.Equal(t, http.StatusSwitchingProtocols, status)
	b, status := dial()
	require.Equal(t, http.StatusSwitchingProtocols, status)
	echo(a)
	echo(b)
	_, status = dial()
	assert.Equal(t, http.StatusTooManyRequests, status, "two connections open: no slot")
	// Past the lease: the connections renew their slots.
	time.Sleep(1500 * time.Millisecond)
	echo(a)
	_, status = dial()
	assert.Equal(t, http.StatusTooManyRequests, status, "still open, still held")
	require.NoError(t, a.Close())
	var d *websocket.Conn
	require.Eventually(t, func() bool {
		d, status = dial()
		return status == http.StatusSwitchingProtocols
	}, 5*time.Second, 20*time.Millisecond, "a connection closed gives its slot back")
	echo(d)
	require.NoError(t, b.Close())
	require.NoError(t, d.Close())
	require.Eventually(t, func() bool { return obs.HeldNow() == 0 }, 5*time.Second, 10*time.Millisecond,
		"every slot of both limits is given back")
}

// EchoWebSocket upgrades the request to a WebSocket that echoes each
// message until the client closes it, and returns then: the handler of
// RunWebSocket's route for frameworks on net/http.
func EchoWebSocket(w http.ResponseWriter, r *http.Request) {
	conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer conn.Close()
	for {
		kind, msg, err := conn.ReadMessage()
		if err != nil || conn.WriteMessage(kind, msg) != nil {
			return
		}
	}
}
