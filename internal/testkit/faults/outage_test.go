package faults_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/faultproxy"
	"github.com/redlimit/redlimit/policy"
)

const (
	workers = 8                    // load goroutines
	pause   = 2 * time.Millisecond // between two requests of a worker
	permits = 5                    // per minute, per client
)

// loadKeys makes a quarter of the requests come from one hot client per
// worker, which is soon denied (by Redis, then from the denial cache), and
// the rest each from a new client, so that they all reach Redis.
func loadKeys(w, i int) string {
	if i%4 == 0 {
		return ip(100, w, 0)
	}
	return ip(w, i/256, i)
}

// checkFailurePolicy asserts that r, a request Redis did not decide, was
// answered with the failure policy.
func checkFailurePolicy(t *testing.T, r rec, failClosed bool) {
	t.Helper()
	if !failClosed {
		assert.Equal(t, http.StatusOK, r.status, "fail open: served")
		assert.Equal(t, "ok", r.body)
		return
	}
	assert.Equal(t, http.StatusServiceUnavailable, r.status, "fail closed: 503")
	assert.Equal(t, "1", r.header.Get("Retry-After"))
	assert.Equal(t, policy.ProblemContentType, r.header.Get("Content-Type"))
	var p map[string]any
	if assert.NoError(t, json.Unmarshal([]byte(r.body), &p), r.body) {
		assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", p["type"])
		assert.EqualValues(t, 503, p["status"])
	}
	for _, leak := range []string{"refused", "dial", "redis", "127.0.0.1", "EOF", "deadline"} {
		assert.NotContains(t, strings.ToLower(r.body), strings.ToLower(leak), "no error text in the response")
	}
}

// TestKillAndRestart kills redis-server under load, restarts it on the
// same port (empty) and checks every request, with the go-redis client
// options of the README (all defaults) and no proxy: the real crash.
func TestKillAndRestart(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		name := "fail open"
		if failClosed {
			name = "fail closed"
		}
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			s := startRedis(t)
			rdb := newRedis(t, &redis.Options{Addr: s.Addr})
			var opts []policy.Option
			if failClosed {
				opts = append(opts, policy.WithFailClosed())
			}
			a := newApp(t, newClient(t, rdb), "kill", core.PerMinute(permits), opts...)

			// A client limited before the outage, by Redis.
			limited := ip(200, 0, 1)
			for i := 0; i < permits; i++ {
				require.Equal(t, http.StatusOK, a.do(limited).status)
			}
			require.Equal(t, http.StatusTooManyRequests, a.do(limited).status)

			stop := a.load(workers, pause, loadKeys)
			defer stop()
			waitFor(t, 5*time.Second, "200 requests before the kill", func() bool { return a.count() >= 200 })

			require.NoError(t, s.Stop())
			killed := time.Now()
			waitFor(t, 5*time.Second, "failed decisions", func() bool { return len(a.failures()) >= 50 })
			time.Sleep(500 * time.Millisecond) // the outage goes on under load
			limitedDuring := a.do(limited)
			restarting := time.Now()
			require.NoError(t, s.Restart())
			back := time.Now()

			// Limiting resumes: a client that never came before (Redis
			// restarted empty anyway) gets its permits, then a 429.
			probe := ip(201, 0, 1)
			var firstDecision, firstDenial time.Duration
			for time.Since(back) < 5*time.Second {
				r := a.do(probe)
				if r.decided() && firstDecision == 0 {
					firstDecision = time.Since(back)
				}
				if r.status == http.StatusTooManyRequests {
					firstDenial = time.Since(back)
					break
				}
				time.Sleep(pause)
			}
			time.Sleep(200 * time.Millisecond) // some load after the recovery
			stop()

			rs := a.records()
			fails := a.failures()
			for _, r := range rs {
				require.Nil(t, r.panic, "panic in the middleware")
			}
			// Every request answered within the bound, with the policy.
			maxAll, n := maxTook(rs)
			outage := between(rs, killed, restarting)
			maxOut, nOut := maxTook(outage)
			undecided := 0
			for _, r := range rs {
				assert.LessOrEqual(t, a.ran(r), bound, "request from %s at %v held %v, %v of it while the process ran",
					r.key, r.start.Sub(killed), r.took(), a.ran(r))
				if !r.decided() && r.status != http.StatusTooManyRequests {
					undecided++
					checkFailurePolicy(t, r, failClosed)
				}
			}
			// Redis decides nothing during the outage: a call that got no
			// answer in time before the Client knew Redis failed is decided
			// in memory, at the process's share, and never more.
			allowedDuring := map[string]int{}
			for _, r := range outage {
				if r.decided() && r.status == http.StatusOK {
					allowedDuring[r.key]++
				}
			}
			for key, n := range allowedDuring {
				assert.LessOrEqual(t, n, permits, "%s: granted in memory past its share", key)
			}
			assert.Equal(t, undecided, len(fails), "the error handler saw every failed decision")
			for _, f := range fails {
				assert.Error(t, f.err)
			}
			assert.Equal(t, http.StatusTooManyRequests, limitedDuring.status,
				"a client denied before the outage stays denied (denial cache)")

			// Within 1 s, plus the margin: after PoolSize dials failed in a
			// row (20 here, reached within the outage), go-redis's pool
			// fails dials at once and a prober redials every second
			// (pool.tryDial), so with go-redis's defaults the first dial
			// after Redis is back may come up to 1 s later (0.88 s measured
			// in a sweep of outage lengths); then come a dial, a HELLO and
			// the probe's six requests; plus the time the test process was
			// stalled meanwhile (see bound).
			require.NotZero(t, firstDenial, "limiting never resumed in 5 s")
			stalled := a.stalls.During(back, back.Add(firstDenial))
			assert.LessOrEqual(t, firstDenial, time.Second+margin+stalled,
				"limiting resumes within 1 s of Redis coming back (the process stalled for %v meanwhile)", stalled)
			t.Logf("%d requests, %d during the %v outage (%d failed decisions in all); longest request %v, during the outage %v (bound %v)",
				n, nOut, restarting.Sub(killed).Round(time.Millisecond), undecided, maxAll, maxOut, bound)
			t.Logf("Restart took %v; after it returned: first decision by Redis %v, first 429 %v",
				back.Sub(restarting).Round(time.Millisecond), firstDecision, firstDenial)
		})
	}
}

// networkFaults are the faults of TestUnresponsiveRedis: each starts on a
// proxy and returns what ends it.
var networkFaults = []struct {
	name  string
	start func(*faultproxy.Proxy) (end func())
}{
	{"replies 300 ms late", func(p *faultproxy.Proxy) func() {
		p.SetLatency(0, 300*time.Millisecond) // three times the timeout
		return func() { p.SetLatency(0, 0) }
	}},
	{"blackholed", func(p *faultproxy.Proxy) func() {
		p.SetBlackhole(true)
		// At the end, the connections accepted meanwhile, never connected
		// to Redis, are reset, as a real network would time them out.
		return func() { p.SetBlackhole(false); p.ResetAll() }
	}},
}

// TestUnresponsiveRedis makes Redis answer late, or not at all, for a
// second under load: no request may be held past the decision timeout, and
// none is served without a decision: a call answered too late may be this
// process's load, so it is decided in memory, even under fail open, until
// the Client knows that Redis fails (no answer a second past the deadline). The go-redis client has ContextTimeoutEnabled,
// without which it bounds reads by its own ReadTimeout (3 s) instead of the
// context: see TestUnresponsiveRedisDefaultClient for that case.
func TestUnresponsiveRedis(t *testing.T) {
	for _, f := range networkFaults {
		t.Run(f.name, func(t *testing.T) {
			noLeaks(t)
			m := unresponsive(t, &redis.Options{ContextTimeoutEnabled: true}, f.start)
			t.Logf("during the fault: %d requests, %d failed decisions, %d decided; longest %v, %v while the process ran (bound %v)",
				m.n, m.failed, m.decided, m.longest, m.longestRan, bound)
			assert.LessOrEqual(t, m.longestRan, bound, "a request was held past the decision timeout")
			assert.Positive(t, m.decided, "decided in memory while Redis is late")
		})
	}
}

// TestUnresponsiveRedisDefaultClient is TestUnresponsiveRedis with the
// go-redis client the README shows, redis.NewClient(&redis.Options{Addr:
// addr}). go-redis v9 does not stop its socket I/O at a context's deadline
// unless ContextTimeoutEnabled is set (it would wait for its ReadTimeout,
// 3 s by default); the core then runs the round trip on a goroutine of its
// own and returns at the deadline.
func TestUnresponsiveRedisDefaultClient(t *testing.T) {
	for _, f := range networkFaults {
		t.Run(f.name, func(t *testing.T) {
			noLeaks(t)
			m := unresponsive(t, &redis.Options{}, f.start)
			t.Logf("during the fault: %d requests, %d failed decisions, %d decided; longest %v, %v while the process ran (bound %v)",
				m.n, m.failed, m.decided, m.longest, m.longestRan, bound)
			assert.LessOrEqual(t, m.longestRan, bound, "a request was held past the decision timeout")
			assert.Positive(t, m.decided, "decided in memory while Redis is late")
		})
	}
}

type faultResult struct {
	n, failed, decided int
	// longest is the longest request, and longestRan the longest time one
	// took while the test process ran (see app.ran).
	longest, longestRan time.Duration
}

// unresponsive runs the load through a proxy, starts the fault for a
// second, and returns what it measured for the requests that started
// during it. Only o's timeouts are used; Addr is the proxy's.
func unresponsive(t *testing.T, o *redis.Options, fault func(*faultproxy.Proxy) func()) faultResult {
	t.Helper()
	s := startRedis(t)
	p := startProxy(t, s.Addr)
	o.Addr = p.Addr()
	rdb := newRedis(t, o)
	a := newApp(t, newClient(t, rdb), "slow", core.PerMinute(permits))
	stop := a.load(workers, pause, loadKeys)
	defer stop()
	waitFor(t, 5*time.Second, "100 requests before the fault", func() bool { return a.count() >= 100 })

	end := fault(p)
	from := time.Now()
	time.Sleep(time.Second) // the fault lasts a second, under load
	end()
	to := time.Now()
	// Recovery: requests are decided again.
	probe := ip(201, 0, 2)
	waitFor(t, 10*time.Second, "decisions after the fault", func() bool { return a.do(probe).decided() })
	stop()

	var m faultResult
	undecided := 0
	for _, r := range a.records() {
		require.Nil(t, r.panic, "panic in the middleware")
		if !r.decided() {
			undecided++
			checkFailurePolicy(t, r, false)
		}
		if !r.start.Before(from) && r.start.Before(to) {
			m.n++
			m.longest = max(m.longest, r.took())
			m.longestRan = max(m.longestRan, a.ran(r))
			if r.decided() {
				m.decided++
			} else {
				m.failed++
			}
		}
	}
	assert.Equal(t, undecided, len(a.failures()), "the error handler saw every failed decision")
	return m
}

// TestConnectionResets resets every connection between go-redis and Redis
// ten times, 100 ms apart, under load (the proxy closes both sides with
// RST). go-redis resends a call whose connection broke, so a script may run
// twice: still no client gets more than its limit, every grant is in the
// log, every request is answered within the bound, and a failed one is
// served (fail open).
func TestConnectionResets(t *testing.T) {
	noLeaks(t)
	s := startRedis(t)
	p := startProxy(t, s.Addr)
	direct := newRedis(t, &redis.Options{Addr: s.Addr})
	a := newApp(t, newClient(t, newRedis(t, &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})),
		"reset", core.PerMinute(permits))
	stop := a.load(workers, pause, loadKeys)
	defer stop()
	waitFor(t, 5*time.Second, "100 requests before the resets", func() bool { return a.count() >= 100 })
	resets := 0
	for i := 0; i < 10; i++ {
		resets += p.ResetAll()
		time.Sleep(100 * time.Millisecond)
	}
	stop()

	rs := a.records()
	grants := map[string]int64{}
	failed := 0
	for _, r := range rs {
		require.Nil(t, r.panic, "panic in the middleware")
		assert.LessOrEqual(t, a.ran(r), bound, "request from %s held %v, %v of it while the process ran", r.key, r.took(), a.ran(r))
		switch {
		case r.decided() && r.status == http.StatusOK:
			grants[r.key]++
		case !r.decided():
			failed++
			checkFailurePolicy(t, r, false)
		}
	}
	assert.Equal(t, failed, len(a.failures()), "the error handler saw every failed decision")
	// A request decided in memory (its call got no answer in time) has its
	// grant written by the Client afterwards: within a few seconds, a
	// second after a payment that got no answer either.
	logged := map[string]int64{}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		missing := false
		for key, n := range grants {
			var err error
			logged[key], err = direct.ZCard(bg, "{reset:"+key+"}:permits").Result()
			require.NoError(t, err)
			missing = missing || logged[key] < n
		}
		if !missing || time.Now().After(deadline) {
			break
		}
	}
	for key, n := range grants {
		assert.LessOrEqual(t, n, int64(permits), "%s: granted more than its limit", key)
		assert.GreaterOrEqual(t, logged[key], n, "%s: a grant missing from the log", key)
		assert.LessOrEqual(t, logged[key], int64(permits), "%s: more than the limit in the log", key)
	}
	longest, _ := maxTook(rs)
	t.Logf("%d requests, %d connections reset, %d failed decisions; longest request %v (bound %v)",
		len(rs), resets, failed, longest, bound)
}
