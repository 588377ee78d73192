package policy_test

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(holderEnv); ok {
		os.Exit(runHolder(spec))
	}
	redistest.Main(m)
}

// counter is an observe.Observer that counts outcomes.
type counter struct {
	mu          sync.Mutex
	outcomes    map[observe.Outcome]int
	transitions []bool
	errors      []error // the first 100 errors reported
}

func (c *counter) Decision(_ context.Context, d observe.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outcomes == nil {
		c.outcomes = map[observe.Outcome]int{}
	}
	c.outcomes[d.Outcome]++
	if d.Err != nil && len(c.errors) < 100 {
		c.errors = append(c.errors, d.Err)
	}
}

// errs returns the errors the decisions reported.
func (c *counter) errs() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errors...)
}

// errs returns the errors the decisions reported.
func (c *counter) Fallback(_ string, active bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.transitions = append(c.transitions, active)
}

func (*counter) Held(string, int64) {}

func (c *counter) count(o observe.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outcomes[o]
}

// A flood of 100 000 distinct keys while the fallback decides keeps the
// process's live heap under the documented bound: 100 000 keys in the
// fallback and 100 000 grants kept for Redis, of at most 256 bytes each.
func TestFallbackKeyFloodIsBounded(t *testing.T) {
	c, mr := mini(t)
	obs := &counter{}
	p := policy.MustNew(c, "flood", core.PerMinute(5), policy.WithObserver(obs),
		policy.WithKey(func(r keyfunc.Request) (string, error) { return r.Header("X-Key"), nil }))
	mr.SetError("LOADING Redis is loading") // Redis fails: the fallback decides
	before := liveHeap()
	r := newReq("192.0.2.1:1")
	for i := range 100_000 {
		d := decideAgain(p, r.with("X-Key", "client-"+strconv.Itoa(i)))
		require.Equal(t, observe.FallbackAllowed, d.Outcome)
	}
	grew := liveHeap() - before
	bound := int64(100_000 * (256 + 256))
	t.Logf("live heap grew by %d bytes for 100 000 keys in the fallback and their grants kept for Redis (bound %d)", grew, bound)
	assert.Less(t, grew, bound)
	assert.Equal(t, 100_000, obs.count(observe.FallbackAllowed))
	runtime.KeepAlive(p)
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// The fallback divides the rate by the instances that share it.
func TestFallbackShare(t *testing.T) {
	c, mr := mini(t)
	p := policy.MustNew(c, "share", core.PerMinute(10), policy.WithFailLocal(3))
	mr.SetError("LOADING Redis is loading")
	r := newReq("192.0.2.1:1")
	for range 4 { // ceil(10 / 3)
		decide(t, p, r, observe.FallbackAllowed, 0)
	}
	d := decide(t, p, r, observe.FallbackDenied, http.StatusTooManyRequests)
	assert.Positive(t, d.Result.RetryAfter)
}

// In wait mode, waiters on one key take turns, and a request whose turn
// cannot come within its maximum wait is rejected at once, not after
// waiting: after one request took the permit of 1 per 500 ms, of 8 more
// with a maximum wait of 1.2 s, two are granted after waiting and six are
// rejected at once.
func TestWaitersTakeTurnsAndHopelessOnesLeaveAtOnce(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	c, err := core.New(rdb, core.WithKeyPrefix(t.Name()+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	require.NoError(t, err)
	p := policy.MustNew(c, "login", core.Rate{Permits: 1, Interval: 500 * time.Millisecond},
		policy.WithWait(1200*time.Millisecond), policy.WithTimeout(2*time.Second))
	decide(t, p, newReq("192.0.2.1:1"), observe.Allowed, 0)
	type outcome struct {
		allowed bool
		took    time.Duration
	}
	out := make([]outcome, 8)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			start := time.Now()
			d := p.Decide(newReq("192.0.2.1:1"))
			out[i] = outcome{d.Status == 0, time.Since(start)}
		})
	}
	wg.Wait()
	granted, atOnce := 0, 0
	for _, o := range out {
		switch {
		case o.allowed:
			granted++
		case o.took < 200*time.Millisecond:
			atOnce++
		default:
			t.Errorf("rejected after waiting %v", o.took)
		}
	}
	assert.Equal(t, 2, granted, "two waiters get a permit, in turn")
	assert.Equal(t, 6, atOnce, "the others are rejected at once")
}

// Local overload (more decisions waiting in this process than the Client
// allows: core.ErrOverloaded) is no Redis failure: under fail open the
// request is shed with a 429, not served unlimited, and one answered too
// late is decided in memory; under the local fallback, the fallback decides
// both.
func TestOverloadIsShed(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	rdb.AddHook(redistest.Slow{Delay: 300 * time.Millisecond, Busy: true})
	// One round trip at a time, one decision waiting: of 10 at once, 8 are
	// turned away; the one in flight and the one waiting behind it get no
	// answer in time.
	c, err := core.New(rdb, core.WithCoalescing(1), core.WithMaxQueue(1),
		core.WithKeyPrefix(t.Name()+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name       string
		opt        policy.Option
		overloaded observe.Outcome // the 8 turned away
		timedOut   observe.Outcome // the 2 that waited for Redis past the timeout
	}{
		{"open", policy.WithFailOpen(), observe.Shed, observe.FallbackAllowed},
		{"local", policy.WithFailLocal(1), observe.FallbackAllowed, observe.FallbackAllowed},
	} {
		obs := &counter{}
		p := policy.MustNew(c, tc.name, core.PerMinute(1000), tc.opt, policy.WithObserver(obs),
			policy.WithTimeout(100*time.Millisecond))
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				d := p.Decide(newReq("192.0.2." + strconv.Itoa(i) + ":1"))
				if d.Outcome == observe.Shed {
					assert.Equal(t, time.Second, d.Result.RetryAfter, "an honest Retry-After: the decision timeout, rounded up")
				}
			})
			if i < 2 {
				time.Sleep(10 * time.Millisecond) // the first takes the round trip, the second waits
			}
		}
		wg.Wait()
		if tc.overloaded == tc.timedOut {
			assert.Equal(t, 10, obs.count(tc.overloaded), "%s: every decision", tc.name)
		} else {
			assert.Equal(t, 8, obs.count(tc.overloaded), "%s: the decisions turned away", tc.name)
			assert.Equal(t, 2, obs.count(tc.timedOut), "%s: the decisions that waited for Redis", tc.name)
		}
	}
}

// A refund that this process was too busy to get answered in time goes
// again later, and is not logged: that is no news of Redis.
func TestABusyRefundIsNotLogged(t *testing.T) {
	var buf bytes.Buffer
	rdb := redistest.Shared(t).Client(t)
	c, err := core.New(rdb, core.WithKeyPrefix(t.Name()+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	require.NoError(t, err)
	p := policy.MustNew(c, "busy", core.PerMinute(1000), policy.WithRefundFailed(), policy.WithTimeout(100*time.Millisecond),
		policy.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	d := p.Decide(newReq("192.0.2.1:1"))
	require.Equal(t, observe.Allowed, d.Outcome)
	// Every round trip now answers after 300 ms: the refund's answer comes
	// too late for its timeout.
	rdb.AddHook(redistest.Slow{Delay: 300 * time.Millisecond, Busy: true})
	d.Done(http.StatusInternalServerError)
	assert.NotContains(t, buf.String(), "refund failed", "a refund answered late is no failure of Redis's")
}

// A full Redis (OOM: maxmemory with noeviction) is Redis failing: the
// local fallback starts, once, the observer and the log say so, and under
// fail open the request is served with the error reported.
func TestAFullRedisStartsTheFallback(t *testing.T) {
	c, mr := mini(t)
	var buf bytes.Buffer
	obs := &counter{}
	// A timeout no load makes the OOM reply miss: a reply too late is no
	// Redis failure.
	patient := policy.WithTimeout(10 * time.Second)
	local := policy.MustNew(c, "full", core.PerMinute(5), policy.WithObserver(obs),
		policy.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), patient)
	open := policy.MustNew(c, "full-open", core.PerMinute(5), policy.WithFailOpen(), patient)
	mr.SetError("OOM command not allowed when used memory > 'maxmemory'.")
	decide(t, local, newReq("192.0.2.1:1"), observe.FallbackAllowed, 0)
	decide(t, local, newReq("192.0.2.1:1"), observe.FallbackAllowed, 0)
	obs.mu.Lock()
	assert.Equal(t, []bool{true}, obs.transitions, "the fallback started, once")
	obs.mu.Unlock()
	assert.Equal(t, 1, strings.Count(buf.String(), "redis cannot decide"), buf.String())
	assert.Contains(t, buf.String(), "OOM")
	d := decide(t, open, newReq("192.0.2.1:1"), observe.ErrorServed, 0)
	assert.ErrorIs(t, d.Err, core.ErrUnavailable)
}

// While Redis fails, a grant of the fallback that a later limit of the
// request refused goes back to the fallback, as it goes back to Redis: the
// client keeps its share of the first limit for requests it serves.
func TestFallbackGivesBackWhatALaterLimitRefused(t *testing.T) {
	c, mr := mini(t)
	first := policy.MustNew(c, "first", core.PerMinute(3))
	second := policy.MustNew(c, "second", core.PerMinute(1))
	mr.SetError("LOADING Redis is loading") // Redis fails: the fallback decides
	r := newReq("192.0.2.1:1")
	for i := range 6 {
		r.reset()
		d := first.Decide(r)
		require.Equal(t, observe.FallbackAllowed, d.Outcome, "request %d", i)
		if i > 0 {
			assert.EqualValues(t, 1, d.Result.Remaining, "request %d: the requests the second limit refused gave theirs back", i)
		}
		later := second.Decide(r)
		want := observe.FallbackDenied
		if i == 0 {
			want = observe.FallbackAllowed
			later.Done(http.StatusOK)
		}
		require.Equal(t, want, later.Outcome, "request %d", i)
		d.Done(cmp.Or(later.Status, http.StatusOK))
	}
}
