package conformance

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// A login limit under a burst: 1 permit per 2 s per client address, wait
// mode up to 3 s, 250 addresses sending 8 requests each, all at once
// (2 000 concurrent requests) on a real redis-server.
const (
	burstAddresses = 250
	burstPerAddr   = 8
	burstInterval  = 2 * time.Second
	burstMaxWait   = 3 * time.Second
)

// RunBurst sends the burst through the handler that build makes: it must
// limit every request with the adapter's middleware applying p, with an
// error handler that calls onError with the request's RemoteAddr. It runs
// in this process (no sockets), once with the default failure policy (the
// local fallback) and once with fail open, and checks that overload does
// not turn the limit off. Grants are judged by the times Redis recorded
// for them (the scores of each address's log, read while the burst runs):
// no address gets more than the limit from Redis in any window; served
// requests beyond its Redis grants are, with the default, the fallback's
// (its share, 1 permit per window) and, with fail open, requests whose
// decision failed, each reported to the error handler.
func RunBurst(t *testing.T, build func(p *policy.Policy, onError func(remoteAddr string)) http.Handler) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	for _, failure := range []Failure{FailDefault, FailOpen} {
		name := map[Failure]string{FailDefault: "default", FailOpen: "fail open"}[failure]
		t.Run(name, func(t *testing.T) {
			prefix := t.Name() + "." + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			c, err := core.New(rdb, core.WithKeyPrefix(prefix))
			require.NoError(t, err)
			obs := &Recorder{}
			opts := []policy.Option{policy.WithWait(burstMaxWait), policy.WithObserver(obs)}
			if failure == FailOpen {
				opts = append(opts, policy.WithFailOpen())
			}
			p := policy.MustNew(c, "login", core.Rate{Permits: 1, Interval: burstInterval}, opts...)
			var mu sync.Mutex
			errorsOf := map[string]int{}
			h := build(p, func(addr string) { mu.Lock(); errorsOf[addr]++; mu.Unlock() })

			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				served  = map[string]int{}
				statusN = map[int]int{}
				addrs   []string
			)
			for a := range burstAddresses {
				addrs = append(addrs, "10.1."+strconv.Itoa(a/250)+"."+strconv.Itoa(a%250+1))
			}
			begin := time.Now()
			for _, ip := range addrs {
				for range burstPerAddr {
					wg.Go(func() {
						req := httptest.NewRequest(http.MethodPost, "/login", nil)
						req.RemoteAddr = ip + ":4000"
						w := httptest.NewRecorder()
						<-start
						h.ServeHTTP(w, req)
						mu.Lock()
						defer mu.Unlock()
						statusN[w.Code]++
						if w.Code == http.StatusOK {
							served[ip+":4000"]++
						}
					})
				}
			}
			// The grants Redis made, with the times it recorded: each
			// address's log, read every 250 ms (a grant stays in the log
			// for the 2 s interval) and once more at the end.
			logs := newGrantLog(rdb, prefix, addrs)
			stop := make(chan struct{})
			reading := make(chan struct{})
			go func() {
				defer close(reading)
				for {
					logs.read(t)
					select {
					case <-stop:
						return
					case <-time.After(250 * time.Millisecond):
					}
				}
			}()
			close(start)
			wg.Wait()
			elapsed := time.Since(begin)
			close(stop)
			<-reading
			logs.read(t)
			t.Logf("%d requests in %v: statuses %v; outcomes: allowed %d, waited %d, denied %d, fallback %d/%d, shed %d, error served %d",
				burstAddresses*burstPerAddr, elapsed.Round(time.Millisecond), statusN,
				obs.Count(observe.Allowed), obs.Count(observe.WaitedAllowed), obs.Count(observe.Denied),
				obs.Count(observe.FallbackAllowed), obs.Count(observe.FallbackDenied), obs.Count(observe.Shed),
				obs.Count(observe.ErrorServed))

			// The fallback grants at most its share, 1, in any window:
			// over the burst, at most one per interval it spans, and one.
			fallbackMost := int(elapsed/burstInterval) + 1
			worst := 0
			for _, ip := range addrs {
				addr := ip + ":4000"
				at := logs.times(ip)
				most := 0
				for _, a := range at {
					n := 0
					for _, b := range at {
						if b >= a && b < a+burstInterval.Milliseconds() {
							n++
						}
					}
					most = max(most, n)
				}
				worst = max(worst, most)
				assert.LessOrEqual(t, most, 1, "%s: %d grants by Redis in one window", addr, most)
				beyond := served[addr] - len(at)
				allowed := fallbackMost
				if failure == FailOpen {
					allowed = errorsOf[addr]
				}
				assert.LessOrEqual(t, beyond, allowed, "%s: %d served beyond its %d Redis grants (%d errors reported)", addr, beyond, len(at), errorsOf[addr])
			}
			t.Logf("most grants by Redis to one address in one window: %d", worst)
			assert.Positive(t, statusN[http.StatusOK], "the burst is served within the limit")
		})
	}
}

// grantLog collects the grants in the logs of the burst's limiters: member
// and score (the Redis time of the grant, in ms), per address.
type grantLog struct {
	rdb    redis.UniversalClient
	keys   map[string]string // address -> its log's key
	grants map[string]map[string]int64
}

func newGrantLog(rdb redis.UniversalClient, prefix string, addrs []string) *grantLog {
	g := &grantLog{rdb: rdb, keys: map[string]string{}, grants: map[string]map[string]int64{}}
	for _, ip := range addrs {
		g.keys[ip] = "{" + prefix + "login:" + keyfunc.Escape(ip) + "}:permits"
		g.grants[ip] = map[string]int64{}
	}
	return g
}

// read adds what the logs hold now.
func (g *grantLog) read(t *testing.T) {
	ctx := context.Background()
	pipe := g.rdb.Pipeline()
	cmds := map[string]*redis.ZSliceCmd{}
	for ip, k := range g.keys {
		cmds[ip] = pipe.ZRangeWithScores(ctx, k, 0, -1)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
	}
	for ip, cmd := range cmds {
		for _, z := range cmd.Val() {
			g.grants[ip][z.Member.(string)] = int64(z.Score)
		}
	}
}

// times returns the Redis times of an address's grants, in ms.
func (g *grantLog) times(ip string) []int64 {
	var out []int64
	for _, at := range g.grants[ip] {
		out = append(out, at)
	}
	return out
}
