package core_test

// Redisson interoperability: Redisson's own tryAcquire, availablePermits and
// release scripts (testdata/redisson, loaded byte for byte as a Java client
// sends them) run beside this package on the same limiter names. They need
// the Lua struct library, so they run on real servers only.

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// loadRedisson reads a Redisson script as Java builds it: the source lines
// concatenated with no separator (the header comment dropped), so its SHA1
// is the one Java clients cache.
func loadRedisson(t testing.TB, file, sha string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("testdata/redisson/" + file)
	require.NoError(t, err)
	var src strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "-- ") {
			src.WriteString(line)
		}
	}
	s := redis.NewScript(src.String())
	require.Equal(t, sha, s.Hash(), "the script is byte-exact")
	return s
}

// javaClient plays a Redisson client: its id, its clock, Redisson's scripts.
type javaClient struct {
	t                testing.TB
	rdb              redis.UniversalClient
	id               string
	skew             time.Duration
	try, avail, rels *redis.Script
}

func newJavaClient(t testing.TB, rdb redis.UniversalClient) *javaClient {
	return &javaClient{
		t: t, rdb: rdb, id: "3f1c8a52-5a9b-4c7e-9d61-0b2e4f7a9c10",
		try:   loadRedisson(t, "tryacquire.lua", "861d9229367b5aa9889ee26c5c31be7baeba2153"),
		avail: loadRedisson(t, "availablepermits.lua", "1378f96e73a4251ef63dadab589a062f8276a044"),
		rels:  loadRedisson(t, "release.lua", "fbec405e63ce6ca39accbc290ded190da3cad1cf"),
	}
}

// keys builds Redisson's five keys for name (suffixName rule).
func (j *javaClient) keys(name string) []string {
	base := "{" + name + "}:"
	if strings.Contains(name, "{") {
		base = name + ":"
	}
	return []string{name, base + "value", base + "value:" + j.id, base + "permits", base + "permits:" + j.id}
}

func (j *javaClient) now() string {
	return itoa(time.Now().Add(j.skew).UnixMilli())
}

// tryAcquire returns true when granted, else Redisson's retry hint in ms.
func (j *javaClient) tryAcquire(name string, permits int64) (bool, int64) {
	j.t.Helper()
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	v, err := j.try.Run(bg, j.rdb, j.keys(name), permits, j.now(), id).Result()
	if err == redis.Nil {
		return true, 0
	}
	require.NoError(j.t, err)
	return false, v.(int64)
}

func (j *javaClient) availablePermits(name string) int64 {
	j.t.Helper()
	v, err := j.avail.Run(bg, j.rdb, j.keys(name), j.now()).Result()
	require.NoError(j.t, err)
	switch v := v.(type) { // Redisson accepts both reply forms
	case int64:
		return v
	case string:
		n, err := parseInt(v)
		require.NoError(j.t, err)
		return n
	}
	j.t.Fatalf("unexpected reply %T", v)
	return 0
}

// runReal runs f on the real server and the cluster.
func runReal(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	t.Run("redis", func(t *testing.T) { t.Parallel(); runRedis(t, f) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); runCluster(t, f) })
}

func TestRedissonSharesTheBudget(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		java := newJavaClient(t, e.rdb)
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, 2*time.Second)))

		ok, _ := java.tryAcquire(e.name, 4)
		require.True(t, ok)
		require.True(t, tryAcquire(t, l, 3))
		assert.EqualValues(t, 3, available(t, l))
		assert.EqualValues(t, 3, java.availablePermits(e.name))

		ok, hint := java.tryAcquire(e.name, 4)
		assert.False(t, ok, "Redisson sees our grants")
		assert.Greater(t, hint, int64(0))
		r, err := l.TryAcquire(bg, 4)
		require.NoError(t, err)
		assert.False(t, r.Allowed, "we see Redisson's grants")
		require.True(t, tryAcquire(t, l, 3))
		ok, _ = java.tryAcquire(e.name, 1)
		assert.False(t, ok)

		// Both reclaim each other's members when they expire.
		time.Sleep(2100 * time.Millisecond)
		assert.EqualValues(t, 10, java.availablePermits(e.name))
		assert.EqualValues(t, 10, available(t, l))
		ok, _ = java.tryAcquire(e.name, 10)
		assert.True(t, ok)
		r, err = l.TryAcquire(bg, 1)
		require.NoError(t, err)
		assert.False(t, r.Allowed)
		assert.Greater(t, r.RetryAfter, time.Second, "exact retry computed from Redisson's member")
		assert.LessOrEqual(t, r.RetryAfter, 2*time.Second)
	})
}

func TestRedissonPerClientBudgetsStaySeparate(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		java := newJavaClient(t, e.rdb)
		l := e.limiter(t)
		require.NoError(t, l.SetRate(bg, rate(core.PerClient, 2, time.Minute)))
		require.True(t, tryAcquire(t, l, 2))
		ok, _ := java.tryAcquire(e.name, 2)
		assert.True(t, ok, "Redisson's client has its own budget")
		assert.False(t, tryAcquire(t, l, 1))
		ok, _ = java.tryAcquire(e.name, 1)
		assert.False(t, ok)
	})
}

// A config written by Redisson (its trySetRate fields, decimal strings) is
// read as is, and Redisson reads ours.
func TestRedissonConfigBothWays(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		java := newJavaClient(t, e.rdb)
		require.NoError(t, e.rdb.HSet(bg, e.name, "rate", "5", "interval", "3000", "keepAliveTime", "0", "type", "0").Err())
		l := e.limiter(t)
		cfg, err := l.Config(bg)
		require.NoError(t, err)
		assert.Equal(t, rate(core.Overall, 5, 3*time.Second), cfg)

		other := e.client(t).Limiter(e.name + ".ours")
		r := rate(core.Overall, 7, 1500*time.Millisecond)
		r.KeepAlive = time.Minute
		require.NoError(t, other.SetRate(bg, r))
		fields, err := e.rdb.HGetAll(bg, other.Name()).Result()
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"rate": "7", "interval": "1500", "type": "0", "keepAliveTime": "60000"}, fields)
		assert.EqualValues(t, 7, java.availablePermits(other.Name()))
	})
}

// Redisson's release credits the counter without touching the log, so its
// members are credited again when they expire. Our reclaim then caps the
// counter at the rate.
func TestRedissonReleaseCannotPushUsAboveRate(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		java := newJavaClient(t, e.rdb)
		l := e.limiter(t)
		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		require.True(t, tryAcquire(t, l, 3))
		require.ErrorIs(t, java.rels.Run(bg, e.rdb, java.keys(e.name), 3).Err(), redis.Nil, "the script returns nothing")
		time.Sleep(1100 * time.Millisecond)
		assert.EqualValues(t, 10, available(t, l))
		r, err := l.TryAcquire(bg, 10)
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		assert.False(t, tryAcquire(t, l, 1), "no 11th permit")
	})
}

// The Redis layout Redisson uses (see the package doc), byte for byte, on
// every backend.
func TestLayout(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithClientID("client-1"))
		l := c.Limiter(e.name)
		assert.Equal(t, []string{
			e.name, "{" + e.name + "}:value", "{" + e.name + "}:value:client-1",
			"{" + e.name + "}:permits", "{" + e.name + "}:permits:client-1",
		}, core.Keys(l))
		tagged := c.Limiter("{" + e.name + "}.x")
		assert.Equal(t, []string{
			"{" + e.name + "}.x", "{" + e.name + "}.x:value", "{" + e.name + "}.x:value:client-1",
			"{" + e.name + "}.x:permits", "{" + e.name + "}.x:permits:client-1",
		}, core.Keys(tagged))

		require.True(t, trySetRate(t, l, rate(core.Overall, 10, time.Second)))
		r, err := l.TryAcquire(bg, 3)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		zs, err := e.rdb.ZRangeWithScores(bg, "{"+e.name+"}:permits", 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, zs, 1)
		m := []byte(zs[0].Member.(string))
		require.Len(t, m, 21)
		assert.EqualValues(t, 0x10, m[0])
		assert.EqualValues(t, 3, binary.LittleEndian.Uint32(m[17:]))
		assert.Equal(t, float64(core.DecisionTime(r).UnixMilli()), zs[0].Score, "scored with Redis TIME in ms")
		v, err := e.rdb.Get(bg, "{"+e.name+"}:value").Result()
		require.NoError(t, err)
		assert.Equal(t, "7", v)

		p := e.client(t, core.WithKeyPrefix("svc:"))
		assert.Equal(t, "svc:"+e.name, p.Limiter(e.name).Name())
		assert.Len(t, core.ClientID(e.client(t)), 36, "a UUID by default")
	})
}
