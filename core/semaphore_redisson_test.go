package core_test

// Redisson interoperability of the Semaphore: Redisson's own
// RPermitExpirableSemaphore scripts (testdata/redisson-semaphore, loaded
// byte for byte as a Java client sends them, with its client-clock
// arguments) run beside this package on the same semaphores, both ways.

import (
	"crypto/rand"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// loadRedissonSemaphore reads a Redisson semaphore script: the last line
// of the file, after its header, is the exact text Java sends; the header
// gives its SHA1.
func loadRedissonSemaphore(t testing.TB, file string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("testdata/redisson-semaphore/" + file)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	src := lines[len(lines)-1]
	require.False(t, strings.HasPrefix(src, "--"), "%s: the script is the last line", file)
	sha := regexp.MustCompile(`SHA1 .* is ([0-9a-f]{40})\.`).FindStringSubmatch(string(b))
	require.NotNil(t, sha, "%s: its header gives its SHA1", file)
	s := redis.NewScript(src)
	require.Equal(t, sha[1], s.Hash(), "%s is byte-exact", file)
	return s
}

// javaSemaphore plays a Redisson client on one semaphore: its clock,
// Redisson's scripts and key names, and its publish command (SPUBLISH on a
// Cluster of Redis 7, Redisson's default there).
type javaSemaphore struct {
	t                                testing.TB
	rdb                              redis.UniversalClient
	n, timeout, channel, pub         string
	try, rel, relMany, update, avail *redis.Script
	trySet, set, permits, acquired   *redis.Script
}

// noLease is Redisson's score of a permit with no lease.
const noLease = "922337203685477"

func newJavaSemaphore(t testing.TB, e *env, name string) *javaSemaphore {
	j := &javaSemaphore{
		t: t, rdb: e.rdb, n: name, pub: "PUBLISH",
		timeout: "{" + name + "}:timeout", channel: "redisson_sc:{" + name + "}",
		try:      loadRedissonSemaphore(t, "tryacquire.lua"),
		rel:      loadRedissonSemaphore(t, "release.lua"),
		relMany:  loadRedissonSemaphore(t, "releasemany.lua"),
		update:   loadRedissonSemaphore(t, "updateleasetime.lua"),
		avail:    loadRedissonSemaphore(t, "availablepermits.lua"),
		trySet:   loadRedissonSemaphore(t, "trysetpermits.lua"),
		set:      loadRedissonSemaphore(t, "setpermits.lua"),
		permits:  loadRedissonSemaphore(t, "getpermits.lua"),
		acquired: loadRedissonSemaphore(t, "acquiredpermits.lua"),
	}
	if strings.Contains(name, "{") {
		j.timeout, j.channel = name+":timeout", "redisson_sc:"+name
	}
	if _, ok := e.rdb.(*redis.ClusterClient); ok {
		j.pub = "SPUBLISH"
	}
	return j
}

// now is Java's System.currentTimeMillis().
func (j *javaSemaphore) now() int64 { return time.Now().UnixMilli() }

func (j *javaSemaphore) run(s *redis.Script, keys []string, args ...any) (any, error) {
	return s.Run(bg, j.rdb, keys, args...).Result()
}

func (j *javaSemaphore) int(s *redis.Script, keys []string, args ...any) int64 {
	j.t.Helper()
	v, err := j.run(s, keys, args...)
	require.NoError(j.t, err)
	switch v := v.(type) {
	case int64:
		return v
	case string: // availablePermits answers GET's string
		n, err := parseInt(v)
		require.NoError(j.t, err)
		return n
	}
	j.t.Fatalf("unexpected reply %T %v", v, v)
	return 0
}

func (j *javaSemaphore) trySetPermits(n int64) bool {
	j.t.Helper()
	return j.int(j.trySet, []string{j.n, j.channel}, n, j.pub) == 1
}

func (j *javaSemaphore) setPermits(n int64) {
	j.t.Helper()
	_, err := j.run(j.set, []string{j.n, j.channel, j.timeout}, n, j.pub)
	if err != redis.Nil {
		require.NoError(j.t, err)
	}
}

// tryAcquire takes permits for lease (0: no lease, as Java's -1). It
// returns the ids when granted; else nil and Redisson's hint, the lowest
// score, or "" when there is none.
func (j *javaSemaphore) tryAcquire(permits int, lease time.Duration) ([]string, string) {
	j.t.Helper()
	expiry := noLease
	if lease > 0 {
		expiry = itoa(j.now() + lease.Milliseconds())
	}
	args := []any{permits, expiry, j.now(), noLease, j.pub}
	var ids []string
	for range permits {
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		ids = append(ids, string(id))
		args = append(args, id)
	}
	v, err := j.run(j.try, []string{j.n, j.timeout, j.channel}, args...)
	if err == redis.Nil {
		return nil, ""
	}
	require.NoError(j.t, err)
	if v == "OK" {
		return ids, ""
	}
	hint, ok := v.(string)
	require.True(j.t, ok && strings.HasPrefix(hint, ":"), "reply %v", v)
	return nil, hint[1:]
}

func (j *javaSemaphore) release(id string) int64 {
	j.t.Helper()
	return j.int(j.rel, []string{j.n, j.channel, j.timeout}, id, 1, j.now(), j.pub)
}

func (j *javaSemaphore) releaseMany(ids []string) int64 {
	j.t.Helper()
	args := []any{len(ids), j.now(), j.pub}
	for _, id := range ids {
		args = append(args, id)
	}
	return j.int(j.relMany, []string{j.n, j.channel, j.timeout}, args...)
}

func (j *javaSemaphore) updateLeaseTime(id string, lease time.Duration) bool {
	j.t.Helper()
	return j.int(j.update, []string{j.n, j.timeout, j.channel}, id, j.now()+lease.Milliseconds(), j.now(), j.pub) == 1
}

func (j *javaSemaphore) availablePermits() int64 {
	j.t.Helper()
	return j.int(j.avail, []string{j.n, j.timeout, j.channel}, j.now(), j.pub)
}

func (j *javaSemaphore) getPermits() int64 {
	j.t.Helper()
	return j.int(j.permits, []string{j.n, j.timeout, j.channel}, j.now(), j.pub)
}

func (j *javaSemaphore) acquiredPermits() int64 {
	j.t.Helper()
	return j.int(j.acquired, []string{j.n, j.timeout, j.channel}, j.now(), j.pub)
}

// The names, keys and channel are Redisson's, for both of its key rules.
func TestRedissonSemaphoreNames(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		for _, name := range []string{e.name, "sem{" + e.name + "}x"} {
			s := e.client(t).Semaphore(name)
			j := newJavaSemaphore(t, e, name)
			assert.Equal(t, []string{j.n, j.timeout}, core.SemaphoreKeys(s))
			assert.Equal(t, j.channel, core.SemaphoreChannel(s))
		}
	})
}

// Permits that Redisson holds count against ours, and ours against
// Redisson's: one total, whoever holds the permits. Redisson's hint and our
// RetryAfter name the same lease.
func TestRedissonSemaphoreSharesThePermits(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		for _, name := range []string{e.name, "sem{" + e.name + "}x"} {
			java := newJavaSemaphore(t, e, name)
			s := e.client(t).Semaphore(name) // the limit Redisson stores
			require.True(t, java.trySetPermits(3))
			javaIDs, _ := java.tryAcquire(2, 10*time.Second)
			require.Len(t, javaIDs, 2)
			assert.EqualValues(t, 1, semAvailable(t, s))

			ours, r := semAcquire(t, s, 1, 20*time.Second)
			require.True(t, r.Allowed)
			assert.Zero(t, r.Remaining)
			assert.EqualValues(t, 0, java.availablePermits())
			assert.EqualValues(t, 3, java.getPermits())
			assert.EqualValues(t, 3, java.acquiredPermits())

			ids, hint := java.tryAcquire(1, time.Second)
			assert.Nil(t, ids, "ours count against Redisson's")
			ends := leaseEnds(t, e, s)
			assert.Equal(t, itoa(ends[0]), hint, "the soonest lease, Redisson's")
			_, r = semAcquire(t, s, 1, time.Second)
			require.False(t, r.Allowed, "Redisson's count against ours")
			assert.Greater(t, r.RetryAfter, 9*time.Second)
			assert.LessOrEqual(t, r.RetryAfter, 10*time.Second+time.Millisecond)

			assert.EqualValues(t, 2, java.releaseMany(javaIDs))
			assert.EqualValues(t, 2, semAvailable(t, s))
			assert.True(t, release(t, s, ours))
			assert.EqualValues(t, 3, java.availablePermits())
			assert.EqualValues(t, 3, java.getPermits())
		}
	})
}

// A semaphore with a limit in code, created by our first call, is read
// by Redisson as it reads its own; Redisson's hint is our lease's end, by
// Redis's clock.
func TestRedissonSemaphoreReadsOurs(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		java := newJavaSemaphore(t, e, e.name)
		s := e.semaphore(t, core.WithPermits(2))
		before := redisMs(t, e)
		l, _ := semAcquire(t, s, 2, time.Second)
		after := redisMs(t, e)
		assert.EqualValues(t, 2, java.getPermits())
		assert.EqualValues(t, 0, java.availablePermits())
		ids, hint := java.tryAcquire(1, time.Second)
		require.Nil(t, ids)
		end, err := parseInt(hint)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, end, before+1000)
		assert.LessOrEqual(t, end, after+1000)

		// Redisson renews and releases our permits by their ids.
		ourIDs := core.LeaseIDs(l)
		assert.True(t, java.updateLeaseTime(ourIDs[0], time.Minute))
		assert.EqualValues(t, 1, java.release(ourIDs[1]))
		assert.EqualValues(t, 1, semAvailable(t, s))
		assert.True(t, release(t, s, l), "the permit Redisson renewed was still held")
		assert.EqualValues(t, 2, java.availablePermits())
	})
}

// A lease that ended is taken back by the other side's next call: ours by
// Redisson's reclaim, Redisson's by ours.
func TestRedissonSemaphoreLeasesEndForBoth(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		java := newJavaSemaphore(t, e, e.name)
		s := e.semaphore(t, core.WithPermits(2))
		semAcquire(t, s, 1, 100*time.Millisecond)
		ids, _ := java.tryAcquire(1, 100*time.Millisecond)
		require.Len(t, ids, 1)
		assert.EqualValues(t, 0, java.availablePermits())
		time.Sleep(150 * time.Millisecond)
		assert.EqualValues(t, 2, semAvailable(t, s))
		assert.EqualValues(t, 2, java.availablePermits(), "Redisson took both back")
		assert.EqualValues(t, 2, counter(t, e, s))
		assert.EqualValues(t, 0, java.release(ids[0]), "Redisson's lease ended")

		semAcquire(t, s, 1, 100*time.Millisecond)
		ids, _ = java.tryAcquire(1, 100*time.Millisecond)
		require.Len(t, ids, 1)
		time.Sleep(150 * time.Millisecond)
		_, r := semAcquire(t, s, 2, time.Minute)
		assert.True(t, r.Allowed, "ours took both back")
		assert.Zero(t, r.Remaining)
	})
}

// A Redisson release frees the slot our callers wait for at once, and is
// published where a Redisson waiter listens, as ours are.
func TestRedissonSemaphoreReleaseFreesOurSlot(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		java := newJavaSemaphore(t, e, e.name)
		s := e.semaphore(t)
		msgs := subscribe(t, e, java.channel)
		require.True(t, java.trySetPermits(1))
		assert.Equal(t, "1", receive(t, msgs), "Redisson's trySetPermits")
		ids, _ := java.tryAcquire(1, time.Minute)
		require.Len(t, ids, 1)
		_, r := semAcquire(t, s, 1, time.Minute)
		require.False(t, r.Allowed)

		assert.EqualValues(t, 1, java.release(ids[0]))
		assert.Equal(t, "1", receive(t, msgs), "Redisson's release")
		l, r := semAcquire(t, s, 1, time.Minute)
		require.True(t, r.Allowed, "the slot Redisson freed")
		assert.True(t, release(t, s, l))
		assert.Equal(t, "1", receive(t, msgs), "our release, as Redisson's waiters hear it")
	})
}

// Redisson's availablePermits and ours agree, in a random sequence of
// both sides' calls with leases ending between them.
func TestRedissonSemaphoreAvailableAgrees(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		java := newJavaSemaphore(t, e, e.name)
		s := e.semaphore(t)
		require.True(t, java.trySetPermits(4))
		var javaIDs []string
		var ours []core.Lease
		lease := func(i int) time.Duration { return time.Duration(100+100*(i%3)) * time.Millisecond }
		for i := range 60 {
			switch i % 6 {
			case 0:
				if ids, _ := java.tryAcquire(1+i%2, lease(i)); ids != nil {
					javaIDs = append(javaIDs, ids...)
				}
			case 1:
				if l, r := semAcquire(t, s, int64(1+i%2), lease(i)); r.Allowed {
					ours = append(ours, l)
				}
			case 2:
				if len(javaIDs) > 0 {
					java.release(javaIDs[0])
					javaIDs = javaIDs[1:]
				}
			case 3:
				if len(ours) > 0 {
					release(t, s, ours[0])
					ours = ours[1:]
				}
			case 4:
				time.Sleep(time.Duration(50*(i%4)) * time.Millisecond)
			case 5:
				if len(ours) > 0 {
					renew(t, s, ours[len(ours)-1], lease(i))
				}
			}
			// A lease may end between the two reads: read ours again, and
			// compare when it did not change meanwhile.
			for range 3 {
				a := semAvailable(t, s)
				j := max(java.availablePermits(), 0)
				if b := semAvailable(t, s); a == b {
					require.Equal(t, a, j, "step %d", i)
					break
				}
			}
			assert.EqualValues(t, 4, java.getPermits(), "step %d", i)
		}
	})
}

// Redisson's setPermits changes the total that a semaphore without
// WithPermits uses, keeping what is held; a limit in code is what Redisson
// reads back.
func TestRedissonSemaphoreSetPermits(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		java := newJavaSemaphore(t, e, e.name)
		s := e.semaphore(t)
		require.True(t, java.trySetPermits(2))
		l, _ := semAcquire(t, s, 2, time.Minute)
		java.setPermits(5)
		assert.EqualValues(t, 3, semAvailable(t, s))
		coded := e.semaphore(t, core.WithPermits(4))
		_, r := semAcquire(t, coded, 1, time.Minute)
		require.True(t, r.Allowed)
		assert.EqualValues(t, 4, java.getPermits())
		assert.EqualValues(t, 1, java.availablePermits())
		assert.True(t, release(t, s, l))
		assert.EqualValues(t, 3, java.availablePermits())
	})
}

// Permits Redisson holds with no lease never end: a refusal then knows no
// retry time, and our keys live as long as they do.
func TestRedissonSemaphoreNoLease(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		java := newJavaSemaphore(t, e, e.name)
		s := e.semaphore(t, core.WithPermits(1))
		semAvailable(t, s)
		l, r := semAcquire(t, s, 1, time.Minute)
		require.True(t, r.Allowed)
		ids, _ := java.tryAcquire(1, 0)
		require.Nil(t, ids)
		require.True(t, release(t, s, l))
		ids, _ = java.tryAcquire(1, 0)
		require.Len(t, ids, 1)

		_, r = semAcquire(t, s, 1, time.Minute)
		assert.False(t, r.Allowed)
		assert.Zero(t, r.RetryAfter, "not known")
		ids2, hint := java.tryAcquire(1, time.Second)
		assert.Nil(t, ids2)
		assert.Empty(t, hint, "nor to Redisson")
		renew(t, s, core.NewLease(1), time.Minute) // a write: the keys' TTLs
		for _, k := range core.SemaphoreKeys(s) {
			ttl, err := e.rdb.PTTL(bg, k).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 100*365*24*time.Hour, "%s lives as long as the permit, or a time.Duration", k)
		}
		assert.EqualValues(t, 1, java.release(ids[0]))
	})
}
