package ha_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/slot"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/observe"
)

const prefix = "ha:"

// usersOn returns n users whose limiter for route lives on master, given
// the slot owners.
func usersOn(owners []*redistest.Server, master *redistest.Server, route string, n int) []string {
	var users []string
	for i := 0; len(users) < n; i++ {
		u := "u" + strconv.Itoa(i)
		if owners[slot.Of(limiterName(prefix, route, u))] == master {
			users = append(users, u)
		}
	}
	return users
}

// clusterLoad is an app on a cluster under steady load over keys of every
// master, and which of them live on the victim, the master of the hot key.
type clusterLoad struct {
	a                   *app
	ld                  *load
	owners              []*redistest.Server
	victim              *redistest.Server
	onVictim, elsewhere map[target]bool
}

// loadCluster starts the app on c through rc, whose round trips tr
// records, and steady load on it, the hot user u0 on /open taking a third
// of it, and waits until every key got a decision.
func loadCluster(t *testing.T, c *redistest.Cluster, rc *redis.ClusterClient, tr *trips, opts ...core.Option) *clusterLoad {
	cl, err := core.New(rc, append([]core.Option{core.WithKeyPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	x := &clusterLoad{a: newApp(t, cl, tr, true), onVictim: map[target]bool{}, elsewhere: map[target]bool{}}
	x.owners, err = c.Owners()
	require.NoError(t, err)
	hot := target{"open", "u0"}
	x.victim = x.owners[slot.Of(limiterName(prefix, hot.route, hot.user))]
	var targets []target
	for _, m := range c.Masters {
		for _, route := range []string{"open", "closed"} {
			for _, u := range usersOn(x.owners, m, route, 2) {
				tg := target{route, u}
				targets = append(targets, tg)
				if m == x.victim {
					x.onVictim[tg] = true
				} else {
					x.elsewhere[tg] = true
				}
			}
		}
	}
	require.True(t, x.onVictim[hot], "the hot key is on the victim")
	for range len(targets) / 2 {
		targets = append(targets, hot)
	}
	x.ld = startLoad(x.a, targets)
	t.Cleanup(func() { x.ld.Stop() })
	require.True(t, x.ld.waitFor(10*time.Second, warm(targets)),
		"every key got a decision before the fault; errors: %s", x.a.errorKinds())
	return x
}

// waitPromoted waits until a node other than victim serves slot as a
// master, and returns when, after fault.
func waitPromoted(t *testing.T, c *redistest.Cluster, victim *redistest.Server, slot int, fault time.Time) time.Duration {
	t.Helper()
	var promoted time.Duration
	require.Eventually(t, func() bool {
		m, err := c.MasterOf(slot)
		if err != nil || m == victim {
			return false
		}
		if role, err := m.Role(); err != nil || role != "master" {
			return false
		}
		promoted = time.Since(fault)
		return true
	}, 30*time.Second, 20*time.Millisecond, "a replica is promoted")
	return promoted
}

// TestClusterFailover kills the master serving a hot key under steady load
// on a Redis Cluster of 3 masters and 3 replicas (its own: cluster node
// timeout 2 s), through a ClusterClient on go-redis's defaults: until its
// replica is promoted, the requests on that master's keys follow the
// failure policy without being held, and those on the other masters' keys
// keep their decisions; after the promotion, decisions and limiting work
// again through the same ClusterClient by each slot's next probe or the
// one after, and a limiter exhausted (and replicated) before the fault is
// still exhausted.
//
// go-redis (v9.23) by itself learns of a failover only from MOVED replies,
// which a killed master never sends, or its periodic reload of the slot map
// (every 60 s by default: go-redis issue #3979); the Client asks for a
// reload when a round trip fails, which this test checks.
func TestClusterFailover(t *testing.T) {
	redistest.Need(t)
	t.Parallel()
	began := time.Now()
	c, err := redistest.StartCluster(3, 1)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	t.Logf("cluster of 3 masters and 3 replicas ready in %v", time.Since(began).Round(time.Millisecond))
	rc := c.Client(t)
	x := loadCluster(t, c, rc, (&trips{}).record(rc))

	// Exhaust a strict limiter on the victim and let its replica get it.
	exhausted := usersOn(x.owners, x.victim, "strict", 1)[0]
	exhaust(t, x.a, rc, exhausted)
	require.NoError(t, redistest.WaitReplicated(x.victim, 5*time.Second))
	time.Sleep(300 * time.Millisecond) // steady load before the fault
	// And one exhausted just before the fault, with no wait for the
	// replica: replication is asynchronous, so it may be lost.
	late := usersOn(x.owners, x.victim, "strict", 3)[2]
	exhaust(t, x.a, rc, late)

	fault := time.Now()
	require.NoError(t, x.victim.Stop())
	promoted := waitPromoted(t, c, x.victim, slot.Of(limiterName(prefix, "open", "u0")), fault)
	back := x.ld.waitFor(20*time.Second, recovered(x.onVictim, fault.Add(promoted), 20))
	waited := time.Since(fault)
	if back {
		time.Sleep(time.Second) // and it stays so
	}
	ss := x.ld.Stop()
	o, elsewhere := measure(ss, x.onVictim, fault), measure(ss, x.elsewhere, fault)
	t.Logf("killed master %s at +0; replica promoted (CLUSTER SLOTS, ROLE) at +%v", x.victim.Addr, promoted.Round(time.Millisecond))
	t.Logf("keys on the killed master: %v", o)
	t.Logf("keys on the other masters: %v", elsewhere)
	t.Logf("failed decisions by error: %s", x.a.errorKinds())
	t.Logf("%d requests in %v; slowest of all %v (bound %v, plus the process's stalls)", len(ss),
		ss[len(ss)-1].start.Sub(ss[0].start).Round(time.Millisecond), slowest(ss).Round(time.Millisecond), maxHold)
	require.True(t, back, "decisions on the killed master's keys came back within 20 s of the promotion (waited %v)", waited)
	checkSamples(t, x.a, ss, fault)
	require.Positive(t, o.failed, "the outage was seen by clients")
	checkRecovery(t, x.a, ss, x.onVictim, fault, fault.Add(promoted))
	// Batches never span two hash slots, so no round trip of another
	// master's keys waits on the dead one.
	checkHealthy(t, x.a, ss, x.elsewhere, fault)

	// Limiting on the promoted replica.
	exhaust(t, x.a, rc, usersOn(x.owners, x.victim, "strict", 2)[1])
	// The limiter exhausted before the fault: its state had reached the
	// replica before the fault, so the promoted replica's log still holds
	// it, and another instance of the application (no local denial cache)
	// is denied.
	assert.Equal(t, strictRate.Permits, logged(t, rc, "strict", exhausted), "the promoted replica's log holds the grants made before the fault")
	cl2, err := core.New(rc, core.WithKeyPrefix(prefix))
	require.NoError(t, err)
	a2 := newApp(t, cl2, x.a.trips, true)
	require.Equal(t, observe.Denied, a2.redisDecision(t, exhausted), "the limiter exhausted before the failover stays exhausted")
	t.Logf("a limiter exhausted just before the fault, without waiting for the replica: %s", survived(a2.redisDecision(t, late)))
}

// survived says whether a limiter exhausted before a failover was still
// exhausted after it, from Redis's decision on one more request.
func survived(o observe.Outcome) string {
	if o == observe.Denied {
		return "still exhausted (its state reached the replica)"
	}
	return "granted again: its state was lost in the failover"
}

// TestCoalescingKeepsShardsApart stops a master of a Redis Cluster with no
// replicas under steady load through two Clients with coalescing on (the
// default) and off: in both, decisions on the keys of the masters that are
// up keep working for as long as it is down. Coalescing batches per hash
// slot, so no pipeline waits on the dead master for a decision that is not
// its own.
func TestCoalescingKeepsShardsApart(t *testing.T) {
	redistest.Need(t)
	t.Parallel()
	c, err := redistest.StartCluster(3, 0)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	rc := c.Client(t)
	tr := (&trips{}).record(rc)
	coalesced := loadCluster(t, c, rc, tr)
	single := loadCluster(t, c, rc, tr, core.WithCoalescing(0))
	require.Equal(t, coalesced.victim, single.victim)
	fault := time.Now()
	require.NoError(t, coalesced.victim.Stop())
	time.Sleep(3 * time.Second)
	cs, ss := coalesced.ld.Stop(), single.ld.Stop()
	t.Logf("keys on the masters that are up, coalescing on: %v", measure(cs, coalesced.elsewhere, fault))
	t.Logf("keys on the masters that are up, coalescing off: %v", measure(ss, single.elsewhere, fault))
	onVictim := measure(cs, coalesced.onVictim, fault)
	t.Logf("keys on the stopped master, coalescing on: %v", onVictim)
	require.Positive(t, onVictim.failed, "the stopped master's keys failed: the fault was real")
	t.Log("coalescing off:")
	checkHealthy(t, single.a, ss, single.elsewhere, fault)
	t.Log("coalescing on:")
	checkHealthy(t, coalesced.a, cs, coalesced.elsewhere, fault)
}
