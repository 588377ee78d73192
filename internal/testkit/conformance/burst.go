package conformance

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/observe"
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

// BurstLimit is the login limit of RunBurst: the handler build returns
// must limit every request with the adapter's middleware at Rate, with
// MaxWait, Failure (FailDefault or FailOpen), the Observer, and an error
// handler that calls OnError with the request's RemoteAddr.
type BurstLimit struct {
	Client   *core.Client
	Name     string
	Rate     core.Rate
	MaxWait  time.Duration
	Failure  Failure
	Observer observe.Observer
	OnError  func(remoteAddr string)
}

// RunBurst sends the burst through the handler that build makes, in this
// process (no sockets), once with the default failure policy (the local
// fallback) and once with fail open, and checks that overload does not turn
// the limit off: with the default, no address gets more than the limit in
// any window plus the fallback's share (1 permit, one instance); with fail
// open, no more than the limit plus the requests served because their
// decision failed, as fail open says.
func RunBurst(t *testing.T, build func(BurstLimit) http.Handler) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	for _, failure := range []Failure{FailDefault, FailOpen} {
		name := map[Failure]string{FailDefault: "default", FailOpen: "fail open"}[failure]
		t.Run(name, func(t *testing.T) {
			prefix := t.Name() + "." + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			c, err := core.New(rdb, core.WithKeyPrefix(prefix))
			require.NoError(t, err)
			obs := &Recorder{}
			var mu sync.Mutex
			errorsOf := map[string]int{}
			h := build(BurstLimit{
				Client: c, Name: "login", Rate: core.Rate{Permits: 1, Interval: burstInterval},
				MaxWait: burstMaxWait, Failure: failure, Observer: obs,
				OnError: func(addr string) { mu.Lock(); errorsOf[addr]++; mu.Unlock() },
			})

			type served struct {
				addr string
				at   time.Duration
			}
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				grants  []served
				statusN = map[int]int{}
			)
			begin := time.Now()
			for a := range burstAddresses {
				addr := "10.1." + strconv.Itoa(a/250) + "." + strconv.Itoa(a%250+1) + ":4000"
				for range burstPerAddr {
					wg.Go(func() {
						req := httptest.NewRequest(http.MethodPost, "/login", nil)
						req.RemoteAddr = addr
						w := httptest.NewRecorder()
						<-start
						h.ServeHTTP(w, req)
						mu.Lock()
						defer mu.Unlock()
						statusN[w.Code]++
						if w.Code == http.StatusOK {
							grants = append(grants, served{addr, time.Since(begin)})
						}
					})
				}
			}
			close(start)
			wg.Wait()
			t.Logf("%d requests in %v: statuses %v; outcomes: allowed %d, waited %d, denied %d, fallback %d/%d, shed %d, error served %d",
				burstAddresses*burstPerAddr, time.Since(begin).Round(time.Millisecond), statusN,
				obs.Count(observe.Allowed), obs.Count(observe.WaitedAllowed), obs.Count(observe.Denied),
				obs.Count(observe.FallbackAllowed), obs.Count(observe.FallbackDenied), obs.Count(observe.Shed),
				obs.Count(observe.ErrorServed))

			// The most grants an address got in any window of the interval
			// (a response ends at most a few ms after its grant).
			byAddr := map[string][]time.Duration{}
			for _, g := range grants {
				byAddr[g.addr] = append(byAddr[g.addr], g.at)
			}
			worst := 0
			for addr, at := range byAddr {
				most := 0
				for _, a := range at {
					n := 0
					for _, b := range at {
						if b >= a && b < a+burstInterval-50*time.Millisecond {
							n++
						}
					}
					most = max(most, n)
				}
				worst = max(worst, most)
				allowed := 1 + 1 // the limit, and the fallback's share of it
				if failure == FailOpen {
					allowed = 1 + errorsOf[addr]
				}
				assert.LessOrEqual(t, most, allowed, "%s: %d grants in one window (%d errors served)", addr, most, errorsOf[addr])
			}
			t.Logf("most grants to one address in one window: %d", worst)
			assert.Positive(t, statusN[http.StatusOK], "the burst is served within the limit")
		})
	}
}
