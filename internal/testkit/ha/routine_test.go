package ha_test

// The routine operations of a deployment that outgrew one Redis, under
// load from two processes (two core.Clients, each on a go-redis client of
// its own), each grant judged by the times the process saw it: moving a
// quarter of a Cluster's slots, killing a Cluster master, a planned
// Sentinel switch-over, and a single Redis killed.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/slot"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// The limit the processes share, and the load on it: routineUsers keys,
// each far over its limit, from routineWorkers goroutines per process.
var routineRate = core.Rate{Permits: 20, Interval: 5 * time.Second}

const (
	routineUsers   = 30
	routineWorkers = 4
	routinePace    = 5 * time.Millisecond
	// routineTimeout is the decision timeout: longer than the default, so
	// that this machine's load, shared with other tests, is not taken for
	// the operation under test.
	routineTimeout = 500 * time.Millisecond
	routinePrefix  = "routine:"
)

// served is one request a process served: when it asked (sent) and got
// its answer (received), by the clock Redis shares with this process on
// one machine, so that the grant's time lies between them; and whether the
// local fallback granted it.
type served struct {
	sent, received time.Time
	local          bool
}

// proc is one process of the application: a core.Client on rdb, the
// policy "limited" keyed by user at routineRate, its fallback's share for
// two instances, and what it served.
type proc struct {
	p           *policy.Policy
	rate        core.Rate
	mu          sync.Mutex
	grants      map[string][]served // by user
	outcomes    map[observe.Outcome]int
	byUserLocal map[string]int // decisions in memory, by user
	transitions []bool         // the fallback's starts (true) and ends
}

func newProc(t *testing.T, rdb redis.UniversalClient, timeout time.Duration, rate ...core.Rate) *proc {
	c, err := core.New(rdb, core.WithKeyPrefix(routinePrefix))
	require.NoError(t, err)
	pr := &proc{grants: map[string][]served{}, outcomes: map[observe.Outcome]int{}, byUserLocal: map[string]int{}, rate: routineRate}
	if len(rate) > 0 {
		pr.rate = rate[0]
	}
	pr.p = policy.MustNew(c, "limited", pr.rate, policy.WithKey(keyfunc.User(userKey{})),
		policy.WithFailLocal(2), policy.WithTimeout(timeout), policy.WithObserver(pr))
	return pr
}

func (pr *proc) Decision(_ context.Context, d observe.Decision) {
	pr.mu.Lock()
	pr.outcomes[d.Outcome]++
	pr.mu.Unlock()
}

func (pr *proc) Fallback(_ string, active bool) {
	pr.mu.Lock()
	pr.transitions = append(pr.transitions, active)
	pr.mu.Unlock()
}

func (*proc) Held(string, int64) {}

// decide decides one request of user and records it.
func (pr *proc) decide(user string) policy.Decision {
	x := &exchange{ctx: context.WithValue(context.Background(), userKey{}, user)}
	sent := time.Now()
	d := pr.p.Decide(x)
	received := time.Now()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	local := d.Outcome == observe.FallbackAllowed || d.Outcome == observe.FallbackDenied
	if local {
		pr.byUserLocal[user]++
	}
	if d.Status == 0 {
		pr.grants[user] = append(pr.grants[user], served{sent, received, d.Outcome == observe.FallbackAllowed})
	}
	return d
}

func (pr *proc) snapshot() (transitions []bool, local map[string]int, outcomes map[observe.Outcome]int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return slices.Clone(pr.transitions), maps(pr.byUserLocal), maps(pr.outcomes)
}

func maps[K comparable](m map[K]int) map[K]int {
	out := make(map[K]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// exchange is a request as the policy sees it, without HTTP.
type exchange struct{ ctx context.Context }

func (x *exchange) Context() context.Context       { return x.ctx }
func (x *exchange) SetContext(ctx context.Context) { x.ctx = ctx }
func (x *exchange) SetHeader(string, string)       {}
func (x *exchange) Route() (string, error)         { return "", nil }
func (x *exchange) Header(string) string           { return "" }
func (x *exchange) HeaderValues(string) []string   { return nil }
func (x *exchange) Query(string) string            { return "" }
func (x *exchange) RemoteAddr() string             { return "192.0.2.1:1" }
func (x *exchange) Value(key any) any              { return x.ctx.Value(key) }

// runLoad sends the load through procs until stop is closed.
func runLoad(procs []*proc, users []string, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, pr := range procs {
		for range routineWorkers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(routinePace):
					}
					pr.decide(users[rand.IntN(len(users))])
				}
			})
		}
	}
	return &wg
}

// overLimit returns the users of which some window of the rate's interval
// holds more grants, Redis's and the fallbacks' of both processes, than
// the rate plus the fallbacks' grants in it, and the worst window's count
// over its bound. A grant is counted in the window that starts with grant
// i only when it certainly lies in it: its answer came less than an
// interval after the millisecond grant i was asked in (Redis's log counts
// whole milliseconds; so this process's stalls can only
// hide an excess, never make one up); the fallbacks' grants that may lie
// in it raise its bound.
func overLimit(procs []*proc, users []string) (over []string, worst string) {
	most := -1
	routineRate := procs[0].rate
	for _, u := range users {
		var gs []served
		for _, pr := range procs {
			pr.mu.Lock()
			gs = append(gs, pr.grants[u]...)
			pr.mu.Unlock()
		}
		slices.SortFunc(gs, func(a, b served) int { return a.sent.Compare(b.sent) })
		for i, gi := range gs {
			// Redis logs a grant to the millisecond, rounded down: grant i
			// lies at or after the millisecond it was asked in.
			end := time.UnixMilli(gi.sent.UnixMilli()).Add(routineRate.Interval)
			certain, bound := 0, int(routineRate.Permits)
			for _, gj := range gs[i:] {
				if gj.sent.After(gi.received.Add(routineRate.Interval)) {
					break
				}
				if gj.received.Before(end) {
					certain++
				}
				if gj.local {
					bound++
				}
			}
			if certain-bound > most {
				most, worst = certain-bound, fmt.Sprintf("%s: %d grants in a window where %d fit", u, certain, bound)
			}
			if certain > bound {
				over = append(over, u)
				break
			}
		}
	}
	return over, worst
}

// clusterProcs starts two processes on c, each with a ClusterClient of its
// own, and warms them: every user got a decision from Redis.
func clusterProcs(t *testing.T, c *redistest.Cluster, users []string, timeout time.Duration, rate ...core.Rate) []*proc {
	procs := []*proc{newProc(t, c.Client(t), timeout, rate...), newProc(t, c.Client(t), timeout, rate...)}
	for _, u := range users {
		for _, pr := range procs {
			require.NotEqual(t, http.StatusServiceUnavailable, pr.decide(u).Status)
		}
	}
	return procs
}

func userNames(n int) []string {
	users := make([]string, n)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
	}
	return users
}

// Moving a quarter of the slots of a 3-master Cluster, live, under load on
// limiters in the slots that move: every decision is Redis's (a slot's
// migration is followed, never decided in memory), no fallback starts, and
// no user gets more than its limit in any window. (What a script must
// declare for that is core's TestAMigratingSlotIsFollowed.)
func TestReshardUnderLoad(t *testing.T) {
	redistest.Need(t)
	c, err := redistest.StartCluster(3, 1)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	owners, err := c.Owners()
	require.NoError(t, err)
	from, to := c.Masters[0], c.Masters[1]
	// Users whose limiters live in the first quarter of the slots, which
	// the first master serves and redis-cli moves first.
	var users []string
	for i := 0; len(users) < 12; i++ {
		u := "u" + strconv.Itoa(i)
		if sl := slot.Of(routinePrefix + "limited:" + u); sl < slot.Count/4 && owners[sl] == from {
			users = append(users, u)
		}
	}
	// The default decision timeout, and a rate the load stays under, so
	// that every request asks Redis.
	procs := clusterProcs(t, c, users, 100*time.Millisecond, core.Rate{Permits: 2000, Interval: 5 * time.Second})
	stop := make(chan struct{})
	wg := runLoad(procs, users, stop)
	time.Sleep(time.Second)
	began := time.Now()
	require.NoError(t, c.Reshard(from, to, slot.Count/4))
	took := time.Since(began)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	after, err := c.Owners()
	require.NoError(t, err)
	for _, u := range users {
		require.Equal(t, to, after[slot.Of(routinePrefix+"limited:"+u)], "%s's slot moved", u)
	}
	for i, pr := range procs {
		transitions, local, outcomes := pr.snapshot()
		t.Logf("process %d: %v", i+1, outcomes)
		assert.Empty(t, transitions, "process %d: no fallback starts", i+1)
		assert.Empty(t, local, "process %d: no decision in memory", i+1)
	}
	over, worst := overLimit(procs, users)
	t.Logf("%d slots moved in %v, with the limiters of %d users under load; worst window: %s", slot.Count/4, took.Round(time.Millisecond), len(users), worst)
	assert.Empty(t, over, "users served over their limit")
}

// Killing a master of a 3-master Cluster with replicas, under load: each
// process's fallback starts once, when its first decision on that master's
// keys fails, and ends once, after a replica took over; only that master's
// keys are decided in memory; and no window holds more than the rate plus
// the fallbacks' grants.
func TestMasterKilledUnderLoad(t *testing.T) {
	redistest.Need(t)
	c, err := redistest.StartCluster(3, 1)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	owners, err := c.Owners()
	require.NoError(t, err)
	victim := c.Masters[0]
	users := userNames(routineUsers)
	onVictim := map[string]bool{}
	for _, u := range users {
		onVictim[u] = owners[slot.Of(routinePrefix+"limited:"+u)] == victim
	}
	procs := clusterProcs(t, c, users, routineTimeout)
	require.NoError(t, redistest.WaitReplicated(victim, 5*time.Second))
	stop := make(chan struct{})
	wg := runLoad(procs, users, stop)
	time.Sleep(time.Second)
	require.NoError(t, victim.Stop())
	killed := time.Now()
	var promoted time.Duration
	require.Eventually(t, func() bool {
		m, err := c.MasterOf(slot.Of(routinePrefix + "limited:" + firstOn(users, onVictim)))
		if err != nil || m == victim {
			return false
		}
		promoted = time.Since(killed)
		return true
	}, 30*time.Second, 50*time.Millisecond, "a replica takes over")
	// Until each process's fallback has ended, and a little after.
	require.Eventually(t, func() bool {
		for _, pr := range procs {
			if tr, _, _ := pr.snapshot(); len(tr) < 2 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "each process's fallback ends")
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	over, worst := overLimit(procs, users)
	for i, pr := range procs {
		transitions, local, outcomes := pr.snapshot()
		t.Logf("process %d: %v; fallback %v", i+1, outcomes, transitions)
		assert.Equal(t, []bool{true, false}, transitions, "process %d: the fallback starts once and ends once", i+1)
		for u := range local {
			assert.True(t, onVictim[u], "process %d: %s decided in memory, but its master did not fail", i+1, u)
		}
	}
	t.Logf("master killed; replica promoted %v later; worst window: %s", promoted.Round(time.Millisecond), worst)
	assert.Empty(t, over, "users served over their limit plus the fallbacks' grants")
}

// firstOn returns the first user whose key is on the victim.
func firstOn(users []string, onVictim map[string]bool) string {
	for _, u := range users {
		if onVictim[u] {
			return u
		}
	}
	return ""
}

// A planned switch-over (SENTINEL FAILOVER) with one master, one replica
// and three sentinels, under load: the grants the processes made on the
// old master in its last moments are written into the new one, so no user
// gets more than its limit in any window.
func TestSwitchOverUnderLoad(t *testing.T) {
	redistest.Need(t)
	d, err := redistest.StartSentinels(3)
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	users := userNames(routineUsers)
	procs := []*proc{newProc(t, d.Client(t), routineTimeout), newProc(t, d.Client(t), routineTimeout)}
	for _, u := range users {
		for _, pr := range procs {
			pr.decide(u)
		}
	}
	stop := make(chan struct{})
	wg := runLoad(procs, users, stop)
	time.Sleep(time.Second)
	_, err = d.Sentinel.CLI("sentinel", "failover", d.Name)
	require.NoError(t, err)
	switched := time.Now()
	require.Eventually(t, func() bool {
		addr, err := d.MasterAddr()
		return err == nil && addr == d.Replica.Addr
	}, 20*time.Second, 50*time.Millisecond, "the sentinels name the replica")
	took := time.Since(switched)
	time.Sleep(routineRate.Interval + time.Second) // the windows around the switch, and after
	close(stop)
	wg.Wait()

	over, worst := overLimit(procs, users)
	for i, pr := range procs {
		_, _, outcomes := pr.snapshot()
		t.Logf("process %d: %v", i+1, outcomes)
	}
	t.Logf("switch-over: the sentinels named the new master %v after SENTINEL FAILOVER; worst window: %s", took.Round(time.Millisecond), worst)
	assert.Empty(t, over, "users served over their limit")
}

// A single Redis killed: the fallback starts on the first decision whose
// call fails, not a second later.
func TestKilledRedisStartsTheFallbackAtOnce(t *testing.T) {
	redistest.Need(t)
	s, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	// The client the README shows: go-redis's defaults, and a context's
	// deadline that stops its I/O.
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	scripts := &scriptCalls{}
	rdb.AddHook(scripts)
	pr := newProc(t, rdb, routineTimeout)
	require.Equal(t, observe.Allowed, pr.decide("u").Outcome)
	require.NoError(t, s.Stop())
	d := pr.decide("u")
	transitions, _, _ := pr.snapshot()
	assert.Equal(t, observe.FallbackAllowed, d.Outcome, "the first decision after the kill")
	assert.Equal(t, []bool{true}, transitions, "the fallback started on it")
	sent := scripts.n.Load()
	for range 5 {
		assert.Equal(t, observe.FallbackAllowed, pr.decide("v").Outcome)
	}
	assert.Equal(t, sent, scripts.n.Load(), "the next ones fail at once, without a round trip")
}

// scriptCalls counts the script calls of a go-redis client.
type scriptCalls struct{ n atomic.Int64 }

func (*scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
