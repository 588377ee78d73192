package policy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
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

// held counts what Held reports, and the decisions.
type held struct {
	counter
	mu sync.Mutex
	n  int64
}

func (h *held) Held(_ string, delta int64) {
	h.mu.Lock()
	h.n += delta
	h.mu.Unlock()
}

func (h *held) now() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func TestNewConcurrencyValidates(t *testing.T) {
	c, _ := mini(t)
	for _, tc := range []struct {
		limit int64
		opts  []policy.Option
		want  error
	}{
		{0, nil, core.ErrInvalidPermits},
		{10_001, nil, core.ErrInvalidPermits},
		{3, []policy.Option{policy.WithCost(4)}, core.ErrInvalidPermits},
		{3, []policy.Option{policy.WithRateFunc(func(keyfunc.Request) (core.Rate, error) { return core.PerMinute(1), nil })}, core.ErrInvalidOption},
		{3, []policy.Option{policy.WithRefundFailed()}, core.ErrInvalidOption},
		{3, []policy.Option{policy.WithLease(500 * time.Millisecond)}, core.ErrInvalidOption},
		{3, []policy.Option{policy.WithLease(1500*time.Millisecond + time.Microsecond)}, core.ErrInvalidOption},
	} {
		_, err := policy.NewConcurrency(c, "c", tc.limit, tc.opts...)
		assert.ErrorIs(t, err, tc.want, "limit %d", tc.limit)
	}
	_, err := policy.New(c, "rate", core.PerMinute(1), policy.WithLease(time.Minute))
	assert.ErrorIs(t, err, core.ErrInvalidOption, "a lease is no rate's")
	policy.MustNew(c, "both", core.PerMinute(1))
	_, err = policy.NewConcurrency(c, "both", 1)
	assert.ErrorContains(t, err, "has the rate 1 per 1m0s (Overall), and this one a concurrency limit of 1")
	policy.MustNewConcurrency(c, "two", 2)
	_, err = policy.NewConcurrency(c, "two", 3)
	assert.ErrorIs(t, err, core.ErrInvalidOption, "one name, one limit")
	assert.Panics(t, func() { policy.MustNewConcurrency(c, "bad", 0) })
}

func uniquePrefix(t *testing.T) string {
	return t.Name() + "." + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
}

// Slots are held until Done, shared by two Clients (two processes), per
// key; a refusal is a 429 whose fields name the limit and carry no time;
// the observer sees the slots in use.
func TestConcurrencyHoldsSlotsUntilDone(t *testing.T) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	prefix := uniquePrefix(t)
	obs := &held{}
	procs := make([]*policy.Policy, 2)
	for i := range procs {
		c, err := core.New(rdb, core.WithKeyPrefix(prefix))
		require.NoError(t, err)
		procs[i] = policy.MustNewConcurrency(c, "exports", 2, policy.WithObserver(obs))
	}
	alice, bob := newReq("192.0.2.1:1"), newReq("192.0.2.2:1")
	a := decide(t, procs[0], alice, observe.Allowed, 0)
	assert.Equal(t, http.Header{
		"Ratelimit-Policy":      {`"exports";q=2;qu="concurrent-requests"`},
		"Ratelimit":             {`"exports";r=1`},
		"X-Ratelimit-Limit":     {"2"},
		"X-Ratelimit-Remaining": {"1"},
	}, alice.resp)
	b := decide(t, procs[1], alice, observe.Allowed, 0)
	assert.EqualValues(t, 2, obs.now())
	d := decide(t, procs[0], alice, observe.Denied, http.StatusTooManyRequests)
	assert.Equal(t, http.Header{
		"Ratelimit-Policy":      {`"exports";q=2;qu="concurrent-requests"`},
		"Ratelimit":             {`"exports";r=0`},
		"X-Ratelimit-Limit":     {"2"},
		"X-Ratelimit-Remaining": {"0"},
	}, alice.resp, "no Retry-After, no reset: when a slot frees is not known")
	var body map[string]any
	require.NoError(t, json.Unmarshal(d.Body, &body))
	assert.Equal(t, []any{"exports"}, body["violated-policies"])
	d.Done(http.StatusTooManyRequests) // a refusal holds nothing
	decide(t, procs[1], bob, observe.Allowed, 0).Done(http.StatusOK)

	a.Done(http.StatusOK)
	assert.EqualValues(t, 1, obs.now())
	c := decide(t, procs[1], alice, observe.Allowed, 0)
	decide(t, procs[0], alice, observe.Denied, http.StatusTooManyRequests)
	b.Done(http.StatusInternalServerError)
	c.Done(http.StatusOK)
	c.Done(http.StatusOK) // twice: gives back once
	assert.Zero(t, obs.now())
	for range 2 {
		defer decide(t, procs[0], alice, observe.Allowed, 0).Done(http.StatusOK)
	}
	decide(t, procs[1], alice, observe.Denied, http.StatusTooManyRequests)
}

// A request keeps its slot past its lease: it renews it while it runs.
func TestConcurrencyRenewsTheLeaseOfASlotHeld(t *testing.T) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	c, err := core.New(rdb, core.WithKeyPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	p := policy.MustNewConcurrency(c, "long", 1, policy.WithLease(time.Second))
	r := newReq("192.0.2.1:1")
	d := decide(t, p, r, observe.Allowed, 0)
	time.Sleep(2500 * time.Millisecond)
	decide(t, p, r, observe.Denied, http.StatusTooManyRequests)
	d.Done(http.StatusOK)
	decide(t, p, r, observe.Allowed, 0).Done(http.StatusOK)
}

// In wait mode, requests over the limit wait their turn and get the slots
// given back, never more held at once than the limit.
func TestConcurrencyWaitMode(t *testing.T) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	c, err := core.New(rdb, core.WithKeyPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	obs := &held{}
	p := policy.MustNewConcurrency(c, "jobs", 2, policy.WithWait(10*time.Second), policy.WithObserver(obs))
	var (
		mu         sync.Mutex
		now, most  int
		wg         sync.WaitGroup
		outcomes   = map[observe.Outcome]int{}
		concurrent = 8
	)
	for range concurrent {
		wg.Go(func() {
			d := p.Decide(newReq("192.0.2.1:1"))
			mu.Lock()
			outcomes[d.Outcome]++
			if d.Status != 0 {
				mu.Unlock()
				return
			}
			now++
			most = max(most, now)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			now--
			mu.Unlock()
			d.Done(http.StatusOK)
		})
	}
	wg.Wait()
	assert.Equal(t, concurrent, outcomes[observe.Allowed]+outcomes[observe.WaitedAllowed], "%v", outcomes)
	assert.GreaterOrEqual(t, outcomes[observe.WaitedAllowed], concurrent-2)
	assert.LessOrEqual(t, most, 2)
	assert.Zero(t, obs.now())
}

// With Redis stopped, each process holds at its share of the limit,
// counting what it held before; when Redis is back (empty), what the
// processes hold is registered in Redis, and the limit holds.
func TestConcurrencyThroughAnOutage(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	rdb := srv.Client(t)
	obs := &held{}
	procs := make([]*policy.Policy, 2)
	for i := range procs {
		c, err := core.New(rdb)
		require.NoError(t, err)
		procs[i] = policy.MustNewConcurrency(c, "c", 4, policy.WithFailLocal(2), policy.WithObserver(obs))
	}
	r := newReq("192.0.2.1:1")
	var done []policy.Decision
	defer func() {
		for _, d := range done {
			d.Done(http.StatusOK)
		}
	}()
	done = append(done, decide(t, procs[0], r, observe.Allowed, 0))
	require.NoError(t, srv.Stop())
	// Process 0 holds 1 of its share of 2: one more; process 1, two.
	done = append(done, decide(t, procs[0], r, observe.FallbackAllowed, 0))
	decide(t, procs[0], r, observe.FallbackDenied, http.StatusTooManyRequests)
	done = append(done, decide(t, procs[1], r, observe.FallbackAllowed, 0))
	done = append(done, decide(t, procs[1], r, observe.FallbackAllowed, 0))
	decide(t, procs[1], r, observe.FallbackDenied, http.StatusTooManyRequests)
	require.NoError(t, srv.Restart()) // empty
	s, err := core.New(rdb)
	require.NoError(t, err)
	sem := s.Semaphore("c:192.0.2.1", core.WithPermits(4))
	require.Eventually(t, func() bool {
		n, err := sem.Available(context.Background())
		return err == nil && n == 0
	}, 10*time.Second, 50*time.Millisecond, "the 4 slots held are registered in Redis again")
	time.Sleep(2 * time.Second) // past the regaining
	decide(t, procs[1], r, observe.Denied, http.StatusTooManyRequests)
	done[0].Done(http.StatusOK)
	done = done[1:]
	decide(t, procs[1], r, observe.Allowed, 0).Done(http.StatusOK)
	assert.EqualValues(t, 3, obs.now())
}

// holderEnv makes the test binary a process that takes slots and waits to
// be killed (TestAKilledHolderLosesItsSlotsWithinTheLease).
const holderEnv = "REDLIMIT_POLICY_HOLDER"

// runHolder takes the slots the spec asks ("addr name slots lease-ms"),
// says "ready" and waits.
func runHolder(spec string) int {
	var addr, name string
	var slots, ms int64
	if _, err := fmt.Sscan(spec, &addr, &name, &slots, &ms); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := core.New(redis.NewClient(&redis.Options{Addr: addr}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p := policy.MustNewConcurrency(c, name, slots, policy.WithLease(time.Duration(ms)*time.Millisecond), policy.WithTimeout(time.Second))
	for range slots {
		if d := p.Decide(newReq("192.0.2.1:1")); d.Outcome != observe.Allowed {
			fmt.Fprintln(os.Stderr, "not allowed:", d.Outcome, d.Err)
			return 2
		}
	}
	fmt.Println("ready")
	select {}
}

// A process killed while holding slots holds them one lease at most after
// its death, by Redis's clock: each lease ends by then (its last renewal
// plus the lease), and the slots are free again.
func TestAKilledHolderLosesItsSlotsWithinTheLease(t *testing.T) {
	redistest.Need(t)
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	name := "killed" + strconv.FormatInt(time.Now().UnixNano(), 36)
	const slots, lease = 3, 2 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d %d", holderEnv, srv.Addr, name, slots, lease.Milliseconds()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, _ := bufio.NewReader(out).ReadString('\n')
	require.Equal(t, "ready\n", line)
	// Renewed meanwhile: a third of the lease, twice over.
	time.Sleep(lease + lease/3)
	c, err := core.New(rdb)
	require.NoError(t, err)
	sem := c.Semaphore(name+":192.0.2.1", core.WithPermits(slots))
	n, err := sem.Available(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "held past the first lease: renewed")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	// Redis's time once the holder is dead: a renewal it sent just before
	// may have run a moment after the signal, but not after this read.
	before, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	ends, err := rdb.ZRangeWithScores(context.Background(), "{"+name+":192.0.2.1}:timeout", 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, ends, slots)
	for _, e := range ends {
		assert.LessOrEqual(t, int64(e.Score), before.UnixMilli()+lease.Milliseconds(), "a lease ends within the lease of the kill")
	}
	require.Eventually(t, func() bool {
		n, err := sem.Available(context.Background())
		return err == nil && n == slots
	}, 2*lease, 20*time.Millisecond)
	after, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	last := int64(0)
	for _, e := range ends {
		last = max(last, int64(e.Score))
	}
	t.Logf("killed at %d ms (Redis's clock); the last lease ended %d ms later; slots free by %d ms later",
		before.UnixMilli(), last-before.UnixMilli(), after.Sub(before).Milliseconds())
}
