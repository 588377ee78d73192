package ha_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
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

// inFlight counts, per user, the requests that two processes serve at
// once, and those of them that a fallback granted, and keeps the worst
// moment: the most served at once over the limit and the fallbacks' share
// of them.
type inFlight struct {
	mu          sync.Mutex
	now, local  map[string]int
	worst, most int // the most over limit+local, and the most at once
	limit       int
	served      int
}

func (f *inFlight) enter(user string, local bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now[user]++
	if local {
		f.local[user]++
	}
	f.most = max(f.most, f.now[user])
	f.worst = max(f.worst, f.now[user]-f.limit-f.local[user])
	f.served++
}

func (f *inFlight) leave(user string, local bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now[user]--
	if local {
		f.local[user]--
	}
}

// Killing the master that holds the slots of a concurrency limit, while
// two processes serve requests that hold them: the fallbacks grant at each
// process's share meanwhile; once a replica took over, the holders
// register their slots in it; at no moment do the requests served at once
// exceed the limit by more than the fallbacks' grants among them; and
// every key the semaphores wrote has a TTL.
func TestConcurrencyThroughAMasterKill(t *testing.T) {
	redistest.Need(t)
	c, err := redistest.StartCluster(3, 1)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	owners, err := c.Owners()
	require.NoError(t, err)
	victim := c.Masters[0]
	const limit = 4
	var users []string
	for i := 0; len(users) < 6; i++ {
		u := "c" + strconv.Itoa(i)
		if owners[slot.Of(routinePrefix+"inflight:"+u)] == victim {
			users = append(users, u)
		}
	}
	type proc struct {
		p   *policy.Policy
		obs *counts
	}
	var procs []proc
	for range 2 {
		cc, err := core.New(c.Client(t), core.WithKeyPrefix(routinePrefix))
		require.NoError(t, err)
		obs := &counts{outcomes: map[observe.Outcome]int{}}
		procs = append(procs, proc{policy.MustNewConcurrency(cc, "inflight", limit, policy.WithKey(keyfunc.User(userKey{})),
			policy.WithFailLocal(2), policy.WithTimeout(routineTimeout), policy.WithLease(3*time.Second), policy.WithObserver(obs)), obs})
	}
	f := &inFlight{now: map[string]int{}, local: map[string]int{}, limit: limit}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, pr := range procs {
		for range 6 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					u := users[rand.IntN(len(users))]
					d := pr.p.Decide(&exchange{ctx: context.WithValue(context.Background(), userKey{}, u)})
					if d.Status != 0 {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					local := d.Outcome == observe.FallbackAllowed
					f.enter(u, local)
					time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
					f.leave(u, local)
					d.Done(http.StatusOK)
				}
			})
		}
	}
	time.Sleep(time.Second)
	require.NoError(t, redistest.WaitReplicated(victim, 5*time.Second))
	require.NoError(t, victim.Stop())
	killed := time.Now()
	require.Eventually(t, func() bool {
		m, err := c.MasterOf(slot.Of(routinePrefix + "inflight:" + users[0]))
		return err == nil && m != victim
	}, 30*time.Second, 50*time.Millisecond, "a replica takes over")
	promoted := time.Since(killed)
	require.Eventually(t, func() bool {
		for _, pr := range procs {
			if len(pr.obs.transitions()) < 2 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "each process's fallback ends")
	time.Sleep(3 * time.Second) // past the regaining, on the new master
	close(stop)
	wg.Wait()

	for i, pr := range procs {
		t.Logf("process %d: %v; fallback %v", i+1, pr.obs.snapshot(), pr.obs.transitions())
		assert.Equal(t, []bool{true, false}, pr.obs.transitions(), "process %d", i+1)
		assert.Positive(t, pr.obs.snapshot()[observe.FallbackAllowed], "process %d granted in memory meanwhile", i+1)
		assert.Zero(t, pr.obs.held(), "process %d gave every slot back", i+1)
	}
	t.Logf("replica promoted %v after the kill; %d requests served, at most %d at once for a user (limit %d); worst moment %d over the limit and the fallbacks' grants",
		promoted.Round(time.Millisecond), f.served, f.most, limit, f.worst)
	assert.LessOrEqual(t, f.worst, 0, "never more at once than the limit and the fallbacks' grants")

	rc := c.Client(t)
	err = rc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, routinePrefix+"*").Result()
		if err != nil {
			return err
		}
		keys2, err := m.Keys(ctx, "{"+routinePrefix+"*").Result()
		if err != nil {
			return err
		}
		for _, k := range append(keys, keys2...) {
			ttl, err := m.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			assert.Positive(t, ttl, "%s expires", k)
		}
		return nil
	})
	require.NoError(t, err)
}

// counts is an observer that counts outcomes, fallback changes and slots.
type counts struct {
	mu       sync.Mutex
	outcomes map[observe.Outcome]int
	changes  []bool
	slots    int64
}

func (c *counts) Decision(_ context.Context, d observe.Decision) {
	c.mu.Lock()
	c.outcomes[d.Outcome]++
	c.mu.Unlock()
}

func (c *counts) Fallback(_ string, active bool) {
	c.mu.Lock()
	c.changes = append(c.changes, active)
	c.mu.Unlock()
}

func (c *counts) Held(_ string, delta int64) {
	c.mu.Lock()
	c.slots += delta
	c.mu.Unlock()
}

func (c *counts) snapshot() map[observe.Outcome]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps(c.outcomes)
}

func (c *counts) transitions() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]bool(nil), c.changes...)
}

func (c *counts) held() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slots
}
