package nethttprl_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// timeout is the policies' decision timeout in the tests of a hanging
// Redis: long enough to stand out from the machine's stalls.
const timeout = 300 * time.Millisecond

// hanging returns a go-redis client whose every command takes 2 s, and a
// monitor of the test process's stalls (see stall).
func hanging(t *testing.T) (*stall.Monitor, *redis.Client) {
	stalls := stall.Watch(t)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(redistest.Slow{Delay: 2 * time.Second})
	return stalls, rdb
}

// A route with two limits answers within one decision timeout while Redis
// hangs: once the first limit's round trip has timed out, the second
// decides without asking Redis.
func TestTwoLimitsOneTimeout(t *testing.T) {
	stalls, rdb := hanging(t)
	for i, fail := range []policy.Option{policy.WithFailOpen(), policy.WithFailLocal(1)} {
		// A Client of its own each time: one that saw Redis fail fails
		// its next calls at once.
		c, err := core.New(rdb, core.WithKeyPrefix(t.Name()+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
		require.NoError(t, err)
		n := strconv.Itoa(i)
		first := nethttprl.New(policy.MustNew(c, "first"+n, core.PerMinute(10), policy.WithTimeout(timeout), fail))
		second := nethttprl.New(policy.MustNew(c, "second"+n, core.PerHour(100), policy.WithTimeout(timeout), fail))
		h := first(second(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })))
		start := time.Now()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		end := time.Now()
		took := end.Sub(start)
		assert.Equal(t, http.StatusOK, w.Code)
		assert.GreaterOrEqual(t, took, timeout, "the first limit waited for Redis")
		// Less the process's stalls (see stall): a loaded machine delays
		// the answer, a second timeout does not stall the process.
		assert.Less(t, took-stalls.During(start, end), timeout+timeout/2, "the second did not: one timeout, not two")
	}
}

// A route with a rate limit and a concurrency limit answers within one
// decision timeout while Redis hangs, served or refused: a slot given back
// by a request that already waited its time on Redis (a refusal's, or a
// served request's once its handler returns) goes back from the slot's
// timer rather than in another timeout of the request's own.
func TestConcurrencyLimitOneTimeout(t *testing.T) {
	stalls, rdb := hanging(t)
	c, err := core.New(rdb, core.WithKeyPrefix(t.Name()+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	require.NoError(t, err)
	rate := nethttprl.New(policy.MustNew(c, "rate", core.PerMinute(10), policy.WithTimeout(timeout), policy.WithFailLocal(1)))
	slots := nethttprl.New(policy.MustNewConcurrency(c, "slots", 1, policy.WithTimeout(timeout), policy.WithFailLocal(1)))
	entered, leave, left := make(chan time.Time, 1), make(chan struct{}), make(chan time.Time, 1)
	h := rate(slots(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- time.Now()
		<-leave
		_, _ = io.WriteString(w, "ok")
		left <- time.Now()
	})))
	// ran is how long the process could run from one time to another (less
	// its stalls: see stall).
	ran := func(from, to time.Time) time.Duration { return to.Sub(from) - stalls.During(from, to) }
	type answer struct {
		code       int
		start, end time.Time
	}
	serve := func() answer {
		start := time.Now()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		return answer{w.Code, start, time.Now()}
	}

	first := make(chan answer, 1)
	go func() { first <- serve() }()
	enteredAt := <-entered // the one slot is held, granted in memory
	second := serve()
	assert.Equal(t, http.StatusTooManyRequests, second.code, "the second request finds the slot held")
	assert.Less(t, ran(second.start, second.end), timeout+timeout/2, "refused within one timeout: its lease goes back from the timer")

	close(leave)
	a := <-first
	leftAt := <-left
	assert.Equal(t, http.StatusOK, a.code)
	assert.Less(t, ran(a.start, enteredAt), timeout+timeout/2, "decided within one timeout")
	assert.Less(t, ran(leftAt, a.end), timeout/2, "its slot goes back from the timer: no second timeout after the handler")
}
