package ha_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/observe"
)

// TestSentinelFailover kills the master of a Sentinel deployment (1 master,
// 1 replica, 1 sentinel; down-after 1 s) under steady load, with the
// middleware on a redis.NewFailoverClient: until the sentinel has promoted
// the replica, requests follow the failure policy without being held, and
// then decisions and limiting work again through the same FailoverClient,
// by the Client's next probe or the one after, with no restart of the
// application; a limiter exhausted (and replicated) before the fault is
// still exhausted.
func TestSentinelFailover(t *testing.T) {
	redistest.Need(t)
	t.Parallel()
	began := time.Now()
	d, err := redistest.StartSentinel()
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	t.Logf("master, replica and sentinel ready in %v", time.Since(began).Round(time.Millisecond))
	rc := d.Client(t)
	cl, err := core.New(rc, core.WithKeyPrefix(prefix))
	require.NoError(t, err)
	a := newApp(t, cl, (&trips{}).record(rc), false)

	var targets []target
	all := map[target]bool{}
	for _, route := range []string{"open", "closed"} {
		for _, u := range []string{"u0", "u1", "u2"} {
			targets = append(targets, target{route, u})
			all[target{route, u}] = true
		}
	}
	ld := startLoad(a, targets)
	t.Cleanup(func() { ld.Stop() })
	require.True(t, ld.waitFor(10*time.Second, warm(targets)), "every key got a decision before the fault; errors: %s", a.errorKinds())

	exhaust(t, a, rc, "x0")
	require.NoError(t, redistest.WaitReplicated(d.Master, 5*time.Second))
	time.Sleep(300 * time.Millisecond) // steady load before the fault
	// And one exhausted just before the fault, with no wait for the
	// replica: replication is asynchronous, so it may be lost.
	exhaust(t, a, rc, "late")

	fault := time.Now()
	require.NoError(t, d.Master.Stop())
	var promoted time.Duration
	require.Eventually(t, func() bool {
		addr, err := d.MasterAddr()
		if err != nil || addr != d.Replica.Addr {
			return false
		}
		if role, err := d.Replica.Role(); err != nil || role != "master" {
			return false
		}
		promoted = time.Since(fault)
		return true
	}, 30*time.Second, 20*time.Millisecond, "the sentinel promotes the replica")

	ok := ld.waitFor(30*time.Second, recovered(all, fault.Add(promoted), 20))
	waited := time.Since(fault)
	if ok {
		time.Sleep(time.Second) // and it stays so
	}
	ss := ld.Stop()
	o := measure(ss, all, fault)
	t.Logf("killed master %s at +0; sentinel reports replica %s as master at +%v",
		d.Master.Addr, d.Replica.Addr, promoted.Round(time.Millisecond))
	t.Logf("all keys: %v", o)
	t.Logf("failed decisions by error: %s", a.errorKinds())
	t.Logf("%d requests in %v; slowest of all %v (bound %v, plus the process's stalls)", len(ss),
		ss[len(ss)-1].start.Sub(ss[0].start).Round(time.Millisecond), slowest(ss).Round(time.Millisecond), maxHold)
	require.True(t, ok, "decisions came back within 30 s of the promotion (waited %v)", waited)
	checkSamples(t, a, ss, fault)
	require.Positive(t, o.failed, "the outage was seen by clients")
	checkRecovery(t, a, ss, all, fault, fault.Add(promoted))

	// Limiting after the failover, through the same FailoverClient.
	exhaust(t, a, rc, "x1")
	// The limiter exhausted before the fault: its state had reached the
	// replica before the fault, so the promoted replica's log still holds
	// it, and another instance of the application (no local denial cache,
	// a FailoverClient of its own) is denied.
	assert.Equal(t, strictRate.Permits, logged(t, rc, "strict", "x0"), "the promoted replica's log holds the grants made before the fault")
	rc2 := d.Client(t)
	cl2, err := core.New(rc2, core.WithKeyPrefix(prefix))
	require.NoError(t, err)
	a2 := newApp(t, cl2, (&trips{}).record(rc2), false)
	require.Equal(t, observe.Denied, a2.redisDecision(t, "x0"), "the limiter exhausted before the failover stays exhausted")
	t.Logf("a limiter exhausted just before the fault, without waiting for the replica: %s", survived(a2.redisDecision(t, "late")))
}
