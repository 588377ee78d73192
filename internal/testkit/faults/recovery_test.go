package faults_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// grantsOf records, for one process, when each request was served and by
// whom, and the fallback's changes.
type grantsOf struct {
	proc        int
	mu          *sync.Mutex
	grants      *[]served
	transitions []bool
	ended       []time.Time // when the fallback ended: Redis answered this process again
}

// served is one request served: when (its decision's end), by which
// process, and whether the local fallback decided it.
type served struct {
	at    time.Time
	proc  int
	local bool
}

func (g *grantsOf) Decision(_ context.Context, d observe.Decision) {
	local := d.Outcome == observe.FallbackAllowed
	if !local && d.Outcome != observe.Allowed && d.Outcome != observe.WaitedAllowed {
		return
	}
	g.mu.Lock()
	*g.grants = append(*g.grants, served{time.Now(), g.proc, local})
	g.mu.Unlock()
}

func (g *grantsOf) Fallback(_ string, active bool) {
	g.mu.Lock()
	g.transitions = append(g.transitions, active)
	if !active {
		g.ended = append(g.ended, time.Now())
	}
	g.mu.Unlock()
}

func (*grantsOf) Held(string, int64) {}

// The limit holds around an outage and after it. Two processes (two
// Clients on one Redis, each with the policy "login", 10 per 2 s on one
// key, WithFailLocal(2)) take a steady load through two outages of 5 s:
// Redis stopped (SIGSTOP), then resumed (SIGCONT), and Redis killed, then
// restarted, empty. Every grant is judged by the time it was
// made, the fallback's and Redis's alike:
//
//   - in any window that starts after an outage began, a key gets at most
//     the rate plus what the fallbacks granted inside that window;
//   - once a process has seen Redis answer again, every grant Redis makes
//     for it counts the grants of the window before it, Redis's and this
//     process's fallback's: at most the rate (the fallback's grants reached
//     Redis's log before Redis decided again; another process's reach it
//     when that one sees Redis answer, a probe a second later at most);
//   - in any window that starts one interval after a recovery, at most
//     the rate;
//   - the fallback starts once and ends once per outage, in each process,
//     though the denial cache answers some requests meanwhile.
func TestTheLimitHoldsAroundAnOutage(t *testing.T) {
	noLeaks(t)
	s := startRedis(t)
	const (
		interval = 2 * time.Second
		// outage is long enough to be one: a round trip may wait a second
		// past its caller's deadline, and a read a second more, before
		// Redis counts as failing.
		outage = 5 * time.Second
	)
	r := core.Rate{Permits: 10, Interval: interval}
	var (
		mu     sync.Mutex
		grants []served
		procs  [2]*grantsOf
		hs     [2]http.Handler
	)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	for i := range procs {
		procs[i] = &grantsOf{proc: i, mu: &mu, grants: &grants}
		rdb := newRedis(t, &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
		c := newClient(t, rdb, core.WithKeyPrefix("outage:"))
		p := policy.MustNew(c, "login", r, policy.WithFailLocal(2), policy.WithKey(keyfunc.Static("k")),
			policy.WithObserver(procs[i]))
		hs[i] = nethttprl.New(p, nethttprl.WithErrorHandler(func(http.ResponseWriter, *http.Request, error) {}))(ok)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range hs {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				hs[i].ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/login", nil))
			}
		})
	}

	time.Sleep(1500 * time.Millisecond)
	stallStart := time.Now()
	require.NoError(t, s.Pause())
	time.Sleep(outage)
	require.NoError(t, s.Resume())
	stallEnd := time.Now()
	time.Sleep(3 * time.Second)
	killStart := time.Now()
	require.NoError(t, s.Stop())
	time.Sleep(outage)
	require.NoError(t, s.Restart())
	killEnd := time.Now()
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	end := time.Now()

	mu.Lock()
	all := append([]served(nil), grants...)
	mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	// A decision's end comes after Redis made it, by up to its timeout:
	// windows are judged with that margin, so that no grant is counted in
	// a window it did not fall in.
	const margin = 150 * time.Millisecond
	count := func(from, to time.Time) (n, local int) {
		for _, g := range all {
			if !g.at.Before(from) && g.at.Before(to) {
				n++
				if g.local {
					local++
				}
			}
		}
		return n, local
	}
	outages := []struct{ start, end, next time.Time }{{stallStart, stallEnd, killStart}, {killStart, killEnd, end}}
	var broken []string
	for _, o := range outages {
		// Any window that starts after the outage began.
		for _, g := range all {
			w := g.at
			if w.Before(o.start) || w.After(o.next) {
				continue
			}
			n, _ := count(w.Add(margin), w.Add(interval))
			_, local := count(w, w.Add(interval))
			if int64(n) > r.Permits+int64(local) {
				broken = append(broken, fmt.Sprintf("window from %v after the outage began: %d grants, %d of them the fallbacks'",
					w.Sub(o.start).Round(time.Millisecond), n, local))
			}
		}
		// Each grant Redis makes for a process once that process has seen
		// Redis answer again counts that process's fallback grants: they
		// reached Redis's log before it decided again (another process's
		// reach it when that one sees Redis answer, a probe a second
		// later at most).
		for _, p := range procs {
			var back time.Time
			for _, e := range p.ended {
				if e.After(o.start) && e.Before(o.next) {
					back = e
					break
				}
			}
			if back.IsZero() {
				broken = append(broken, fmt.Sprintf("process %d never saw Redis answer after the outage at %v", p.proc, o.start))
				continue
			}
			for _, g := range all {
				if g.local || g.proc != p.proc || g.at.Before(back) || g.at.After(o.next) {
					continue
				}
				n := 0
				for _, h := range all {
					if h.at.After(g.at.Add(-interval+margin)) && !h.at.After(g.at) && (!h.local || h.proc == p.proc) {
						n++
					}
				}
				if int64(n) > r.Permits {
					broken = append(broken, fmt.Sprintf("process %d: Redis granted %v after the outage with %d grants in the window before it (Redis's and this process's fallback's)",
						p.proc, g.at.Sub(o.end).Round(time.Millisecond), n))
				}
			}
		}
		// Windows that start one interval after the recovery.
		for w := o.end.Add(interval); w.Add(interval).Before(o.next); w = w.Add(50 * time.Millisecond) {
			if n, _ := count(w.Add(margin), w.Add(interval)); int64(n) > r.Permits {
				broken = append(broken, fmt.Sprintf("window from %v after recovery: %d grants", w.Sub(o.end).Round(time.Millisecond), n))
			}
		}
	}
	locals := 0
	for _, g := range all {
		if g.local {
			locals++
		}
	}
	t.Logf("%d grants in %v, %d of them the fallbacks'; %d broken windows", len(all),
		end.Sub(stallStart.Add(-1500*time.Millisecond)).Round(time.Millisecond), locals, len(broken))
	assert.Empty(t, broken[:min(len(broken), 10)], "%d windows over their bound", len(broken))
	assert.Positive(t, locals, "the fallbacks decided during the outages")
	for i, p := range procs {
		mu.Lock()
		tr := append([]bool(nil), p.transitions...)
		mu.Unlock()
		assert.Equal(t, []bool{true, false, true, false}, tr, "process %d: one start and one end per outage", i)
	}
}
