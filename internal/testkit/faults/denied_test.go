package faults_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/internal/testkit/stall"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// TestADeniedClientStaysDeniedWhenRedisStopsAnswering: a client that
// Redis denied stays denied until its retry time when Redis then stops
// answering (SIGSTOP) or is killed, also once the denial is older than the denial
// cache trusts while Redis answers (a second), and before the Client knows
// that Redis fails: the calls that get no answer then would otherwise be
// decided in memory, at the process's full share, as if Redis had never
// denied the client. A client that Redis never denied gets the failure
// policy, and the first client is served again once Redis answers and
// grants.
func TestADeniedClientStaysDeniedWhenRedisStopsAnswering(t *testing.T) {
	faults := []struct {
		name  string
		start func(*redistest.Server) (end func() error)
	}{
		{"stopped", func(s *redistest.Server) func() error {
			require.NoError(t, s.Pause())
			return s.Resume
		}},
		{"killed", func(s *redistest.Server) func() error {
			require.NoError(t, s.Stop())
			return s.Restart
		}},
	}
	for _, f := range faults {
		for _, failure := range []struct {
			name string
			opt  policy.Option
		}{{"fail open", policy.WithFailOpen()}, {"fail local", policy.WithFailLocal(1)}} {
			t.Run(f.name+", "+failure.name, func(t *testing.T) {
				noLeaks(t)
				s := startRedis(t)
				rdb := newRedis(t, &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
				a := newApp(t, newClient(t, rdb), "denied", core.PerMinute(2), failure.opt)
				const abuser = "10.9.9.9"
				for i := 0; i < 2; i++ {
					require.Equal(t, http.StatusOK, a.do(abuser).status)
				}
				denied := a.do(abuser)
				require.Equal(t, http.StatusTooManyRequests, denied.status, "Redis denies the third request")

				// Past the time a denial answers while Redis answers.
				time.Sleep(1200 * time.Millisecond)
				end := f.start(s)
				for i := 0; i < 5; i++ {
					r := a.do(abuser)
					assert.Equal(t, http.StatusTooManyRequests, r.status,
						"request %d after the fault began: denied until the retry time Redis gave", i)
					assert.NotEmpty(t, r.header.Get("Retry-After"))
					time.Sleep(50 * time.Millisecond)
				}
				other := a.do("10.8.8.8")
				assert.Equal(t, http.StatusOK, other.status, "a client never denied gets the failure policy: served")
				require.NoError(t, end())

				// Once Redis answers, a reset made elsewhere (or a restart
				// that lost the limiter) is seen: the denial, older than a
				// second, is Redis's to confirm.
				c2 := newClient(t, newRedis(t, &redis.Options{Addr: s.Addr}))
				_, err := c2.Limiter("denied:" + abuser).Delete(bg)
				require.NoError(t, err)
				waitFor(t, 5*time.Second, "the first client served again", func() bool {
					return a.do(abuser).status == http.StatusOK
				})
			})
		}
	}
}

// TestADeniedClientsRequestAnswersWithinOneTimeout: a limit whose call gets
// no answer in time, answered by the denial cache (here in dry run, so that
// the request goes on), holds the request's later limits to the deadline it
// missed, as any call without an answer does: the request answers within
// one timeout, not one per limit.
func TestADeniedClientsRequestAnswersWithinOneTimeout(t *testing.T) {
	noLeaks(t)
	s := startRedis(t)
	c := newClient(t, newRedis(t, &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true}))
	stalls := stall.Watch(t)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	const long = 300 * time.Millisecond // a timeout that stands out from the machine's stalls
	first := nethttprl.New(policy.MustNew(c, "first", core.PerMinute(2), policy.WithDryRun(), policy.WithFailOpen(), policy.WithTimeout(long)))
	second := nethttprl.New(policy.MustNew(c, "second", core.PerMinute(100), policy.WithFailOpen(), policy.WithTimeout(long)))
	h := first(second(ok))
	do := func() (int, time.Duration) {
		req := httptest.NewRequest(http.MethodGet, "http://svc/", nil)
		req.RemoteAddr = "10.9.9.9:40000"
		w := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(w, req)
		end := time.Now()
		return w.Code, end.Sub(start) - stalls.During(start, end)
	}
	for range 3 { // the third is denied, in dry run: served
		code, _ := do()
		require.Equal(t, http.StatusOK, code)
	}
	time.Sleep(1200 * time.Millisecond) // past the time a denial answers while Redis answers
	require.NoError(t, s.Pause())
	defer func() { require.NoError(t, s.Resume()) }()
	code, took := do()
	assert.Equal(t, http.StatusOK, code, "dry run, then fail open: served")
	// Less the process's stalls (see stall): two timeouts would be 600 ms.
	assert.Less(t, took, long+long/2, "one timeout, not one per limit")
}
