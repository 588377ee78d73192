package core_test

// What clients that share a Redis cannot do to each other: costs chosen to
// make Redis walk a long log, a key poisoned with another type of value, a
// full Redis, a rate stored beyond what a time.Duration holds, a key
// prefix that would make every name invalid.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/slot"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// fillLog writes n grants of one permit into l's log (an Overall rate given
// in code), spread over the last half of the window, and sets its counter
// to match, as n acquires would.
func fillLog(t testing.TB, rdb redis.UniversalClient, l *core.Limiter, r core.Rate, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := l.TryAcquire(ctx, 1) // creates the config; the log gets 1
	require.NoError(t, err)
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	keys := core.Keys(l)
	half := r.Interval.Milliseconds() / 2
	for start := 1; start < n; start += 1000 {
		var zs []redis.Z
		for i := start; i < min(start+1000, n); i++ {
			zs = append(zs, redis.Z{Score: float64(now.UnixMilli() - half + int64(i)*half/int64(n)), Member: core.Member(1)})
		}
		require.NoError(t, rdb.ZAdd(ctx, keys[3], zs...).Err())
	}
	require.NoError(t, rdb.Set(ctx, keys[1], r.Permits-int64(n), r.Interval*2).Err())
	require.NoError(t, rdb.PExpire(ctx, keys[3], r.Interval*2).Err())
}

// commandCalls returns the calls Redis counted of each command, scripts'
// included.
func commandCalls(t testing.TB, rdb redis.UniversalClient) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		calls[name] = n
	}
	return calls
}

// A denial's work does not grow with the log, whatever the cost the client
// chooses: on a log of 10 000 grants, a denial reads the oldest grants and
// one more by rank, for a cost of 1 001 as for one of 9 999 (before, it
// walked the log until the cost was covered: one read per 1 000 grants).
// Its retry time is never early: exact here, every grant holding a permit.
func TestDenialWorkDoesNotGrowWithTheLog(t *testing.T) {
	rdb := redistest.Own(t)
	c, err := core.New(rdb, core.WithDenialCache(0))
	require.NoError(t, err)
	r := core.PerMinute(10_000)
	l := c.Limiter(uniqueName(t), core.WithRate(r))
	fillLog(t, rdb, l, r, 10_000)
	log, err := rdb.ZRangeWithScores(bg, core.Keys(l)[3], 0, -1).Result()
	require.NoError(t, err)
	for _, costs := range [][2]int64{{1001, 1020}, {9980, 9999}} {
		require.NoError(t, rdb.ConfigResetStat(bg).Err())
		for cost := costs[0]; cost <= costs[1]; cost++ {
			before, err := rdb.Time(bg).Result()
			require.NoError(t, err)
			res, err := l.TryAcquire(bg, cost)
			require.NoError(t, err)
			require.False(t, res.Allowed)
			after, err := rdb.Time(bg).Result()
			require.NoError(t, err)
			// The grant whose leaving frees cost permits: cost-th from the
			// oldest (10 000 out of 10 000: the first acquire's and the
			// 9 999 written), as Redis's clock before and after the call
			// bounds the time it was decided (read in whole milliseconds).
			leaves := time.UnixMilli(int64(log[cost-1].Score)).Add(r.Interval)
			assert.GreaterOrEqual(t, res.RetryAfter, leaves.Sub(after)-time.Millisecond, "cost %d: never early", cost)
			assert.LessOrEqual(t, res.RetryAfter, leaves.Sub(before)+time.Millisecond, "cost %d: exact", cost)
		}
		calls := commandCalls(t, rdb)
		reads := calls["zrange"] + calls["zrangebyscore"] + calls["zrevrange"]
		t.Logf("costs %d to %d: %d log reads for 20 denials", costs[0], costs[1], reads)
		assert.LessOrEqual(t, reads, int64(20*4), "at most 4 reads of the log per denial, whatever the cost")
	}
}

// A call gives back at most 1 000 grants that left the window, the rest
// on later calls, so that its work does not grow with the log; a denial
// meanwhile says to retry in 1 ms, as the permits may be back at once.
func TestACallGivesBackAtMostAThousandGrants(t *testing.T) {
	rdb := redistest.Own(t)
	c, err := core.New(rdb, core.WithDenialCache(0))
	require.NoError(t, err)
	r := core.PerMinute(2_500)
	l := c.Limiter(uniqueName(t), core.WithRate(r))
	_, err = l.TryAcquire(bg, 1) // creates the config
	require.NoError(t, err)
	now, err := rdb.Time(bg).Result()
	require.NoError(t, err)
	// 2 500 grants of a permit each, all out of the window: the counter is 0.
	keys := core.Keys(l)
	zs := make([]redis.Z, 2_500)
	for i := range zs {
		zs[i] = redis.Z{Score: float64(now.Add(-r.Interval).UnixMilli() - 1_000 - int64(i)), Member: core.Member(1)}
	}
	require.NoError(t, rdb.Del(bg, keys[3]).Err())
	require.NoError(t, rdb.ZAdd(bg, keys[3], zs...).Err())
	require.NoError(t, rdb.PExpire(bg, keys[3], 2*r.Interval).Err())
	require.NoError(t, rdb.Set(bg, keys[1], 0, 2*r.Interval).Err())

	res, err := l.TryAcquire(bg, 1_500)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "1 000 given back, 1 500 asked")
	assert.Equal(t, time.Millisecond, res.RetryAfter, "the rest may be back at once")
	assert.EqualValues(t, 1_500, rdb.ZCard(bg, keys[3]).Val(), "1 000 grants dropped")
	assert.Equal(t, "1000", rdb.Get(bg, keys[1]).Val(), "and given back")

	res, err = l.TryAcquire(bg, 1_500)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "1 000 more given back")
	assert.EqualValues(t, 500, res.Remaining)
	assert.EqualValues(t, 501, rdb.ZCard(bg, keys[3]).Val(), "500 left to give back, and the grant")

	n, err := l.AvailablePermits(bg)
	require.NoError(t, err)
	assert.EqualValues(t, 1_000, n, "the last 500 counted as back")
}

// A key of another type under one limiter's name fails that limiter's
// callers alone: the limiters decided in the same script call are decided,
// and nothing is written for the poisoned one.
func TestAPoisonedKeyFailsAlone(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t)
		r := rate(core.Overall, 5, time.Minute)
		tag := "{" + e.name + "}" // one Cluster slot: one script call
		var ls []*core.Limiter
		for i := range 3 {
			ls = append(ls, c.Limiter(tag+strconv.Itoa(i), core.WithRate(r)))
		}
		for _, key := range []int{0, 3} { // the config hash, then the log
			bad := core.Keys(ls[1])[key]
			require.NoError(t, e.rdb.Del(bg, core.Keys(ls[1])...).Err())
			require.NoError(t, e.rdb.Set(bg, bad, "not a limiter's", 0).Err())
			var acqs []core.Acquire
			for _, l := range ls {
				acqs = append(acqs, core.Acquire{Limiter: l, Permits: 1, Member: core.Member(1)},
					core.Acquire{Limiter: l, Permits: 1, Member: core.Member(1)})
			}
			res, errs, err := core.AcquireTogether(bg, acqs)
			require.NoError(t, err)
			for i, a := range acqs {
				if a.Limiter == ls[1] {
					assert.ErrorIs(t, errs[i], core.ErrInvalidConfig, "the poisoned limiter's callers")
					continue
				}
				require.NoError(t, errs[i], "a neighbour of the poisoned limiter")
				assert.True(t, res[i].Allowed)
			}
			n, err := e.rdb.Exists(bg, core.Keys(ls[1])[key]).Result()
			require.NoError(t, err)
			assert.EqualValues(t, 1, n)
			for k, other := range core.Keys(ls[1]) {
				if k != key {
					n, err := e.rdb.Exists(bg, other).Result()
					require.NoError(t, err)
					assert.Zero(t, n, "nothing written for the poisoned limiter: %s", other)
				}
			}
			_, err = ls[1].TryAcquire(bg, 1)
			assert.ErrorIs(t, err, core.ErrInvalidConfig, "alone too")
		}
	})
}

// Under concurrency, with coalescing: 128 limiters decided at once, one of
// them poisoned; none of the others fails.
func TestAPoisonedKeyFailsAloneUnderLoad(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		c := e.client(t)
		r := rate(core.Overall, 1000, time.Minute)
		bad := c.Limiter(e.name+"-bad", core.WithRate(r))
		require.NoError(t, e.rdb.Set(bg, core.Keys(bad)[0], "not a limiter's config", 0).Err())
		var (
			wg              sync.WaitGroup
			mu              sync.Mutex
			failed, granted int
		)
		for g := range 128 {
			wg.Go(func() {
				l := bad
				if g > 0 {
					l = c.Limiter(e.name+"-"+strconv.Itoa(g%16), core.WithRate(r))
				}
				for range 20 {
					res, err := l.TryAcquire(bg, 1)
					mu.Lock()
					switch {
					case l == bad:
						assert.ErrorIs(t, err, core.ErrInvalidConfig)
					case err != nil:
						failed++
					case res.Allowed:
						granted++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		assert.Zero(t, failed, "neighbours of the poisoned limiter failed")
		assert.Equal(t, 127*20, granted)
	})
}

// A rate stored beyond the longest time.Duration, 292 years (another
// client wrote it: 9.3e15 ms, 295 years), is an invalid config, not a wait
// that overflows into a busy loop.
func TestAStoredIntervalBeyondADurationIsInvalid(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		l := e.limiter(t)
		require.NoError(t, e.rdb.HSet(bg, core.Keys(l)[0], "rate", "1", "interval", "9300000000000000", "type", "0").Err())
		_, err := l.TryAcquire(bg, 1)
		assert.ErrorIs(t, err, core.ErrInvalidConfig)
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		assert.ErrorIs(t, l.Acquire(ctx, 1), core.ErrInvalidConfig, "no loop")
		_, err = l.Config(bg)
		assert.ErrorIs(t, err, core.ErrInvalidConfig)
	})
}

// A key prefix that would make every limiter name invalid is an error at
// New, not a failure of every call.
func TestAnInvalidKeyPrefixIsAnError(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, prefix := range []string{"svc}", "svc{", "{}:", "a}b"} {
		_, err := core.New(rdb, core.WithKeyPrefix(prefix))
		assert.ErrorIs(t, err, core.ErrInvalidOption, "%q", prefix)
	}
	for _, prefix := range []string{"svc:", "{svc}:", "a}{b}:", ""} {
		_, err := core.New(rdb, core.WithKeyPrefix(prefix))
		assert.NoError(t, err, "%q", prefix)
	}
}

// A full Redis (maxmemory, noeviction) refuses every script that may
// write: that is Redis failing, for every caller alike.
func TestAFullRedisIsUnavailable(t *testing.T) {
	redistest.Need(t)
	s, err := redistest.Start("--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	rdb := s.Client(t)
	for i := 0; rdb.Set(bg, "fill:"+strconv.Itoa(i), strings.Repeat("x", 10_000), 0).Err() == nil; i++ {
		require.Less(t, i, 10_000)
	}
	c, err := core.New(rdb)
	require.NoError(t, err)
	_, err = c.Limiter(uniqueName(t), core.WithRate(core.PerMinute(10))).TryAcquire(bg, 1)
	assert.ErrorIs(t, err, core.ErrUnavailable)
	assert.True(t, strings.Contains(err.Error(), "OOM"), err.Error())
	assert.Equal(t, 1, strings.Count(err.Error(), core.ErrUnavailable.Error()), "it says so once: %v", err)
	assert.False(t, errors.Is(err, core.ErrInvalidConfig))
}

// BenchmarkHostileDenials measures what clients choosing their costs cost
// Redis, on a redis-server of its own, with the local denial cache off (so
// that every request reaches Redis): the script time per denial (Redis's
// own clock, INFO commandstats) on a log of 10 000 grants, each with a new
// cost; and the longest script call (SLOWLOG) when 128 denials with
// distinct costs are decided at once, coalesced, on a log of 50 000.
//
//	go test -run '^$' -bench BenchmarkHostileDenials -benchtime 2000x ./core/
func BenchmarkHostileDenials(b *testing.B) {
	rdb := redistest.Own(b)
	c, err := core.New(rdb, core.WithDenialCache(0))
	require.NoError(b, err)
	scriptTime := func() (calls, usec int64) {
		info, err := rdb.Info(bg, "commandstats").Result()
		require.NoError(b, err)
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
				for _, f := range strings.Split(rest, ",") {
					k, v, _ := strings.Cut(f, "=")
					n, _ := strconv.ParseInt(v, 10, 64)
					switch k {
					case "calls":
						calls = n
					case "usec":
						usec = n
					}
				}
			}
		}
		return calls, usec
	}

	b.Run("one denial, log of 10 000", func(b *testing.B) {
		r := core.PerMinute(10_000)
		l := c.Limiter(uniqueName(b), core.WithRate(r))
		fillLog(b, rdb, l, r, 10_000)
		require.NoError(b, rdb.ConfigResetStat(bg).Err())
		cost := int64(1000)
		for b.Loop() {
			res, err := l.TryAcquire(bg, cost)
			if err != nil || res.Allowed {
				b.Fatal(err, res.Allowed)
			}
			cost = cost%9000 + 1001 // a new cost each time
		}
		calls, usec := scriptTime()
		b.ReportMetric(float64(usec)/float64(calls), "script-µs/denial")
	})

	b.Run("128 at once, log of 50 000", func(b *testing.B) {
		r := core.PerMinute(50_000)
		l := c.Limiter(uniqueName(b), core.WithRate(r))
		fillLog(b, rdb, l, r, 50_000)
		require.NoError(b, rdb.ConfigSet(bg, "slowlog-log-slower-than", "0").Err())
		require.NoError(b, rdb.ConfigSet(bg, "slowlog-max-len", "100000").Err())
		require.NoError(b, rdb.SlowLogReset(bg).Err())
		for b.Loop() {
			var wg sync.WaitGroup
			for i := range 128 {
				wg.Go(func() {
					if _, err := l.TryAcquire(bg, int64(10_000+i)); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
		}
		entries, err := rdb.SlowLogGet(bg, -1).Result()
		require.NoError(b, err)
		var longest time.Duration
		for _, e := range entries {
			if len(e.Args) > 0 && strings.EqualFold(e.Args[0], "evalsha") {
				longest = max(longest, e.Duration)
			}
		}
		b.ReportMetric(float64(longest.Microseconds())/1000, "longest-script-ms")
	})
}

// A script declares only the keys it touches, so that a Redis Cluster
// moving the limiter's slot serves it where its keys are: on the old
// master while they are there (a script that also declared keys that never
// exist would get TRYAGAIN for the whole move), then, once they moved, on
// the new one (ASK). A slot is set migrating by hand here, as redis-cli
// --cluster reshard does, with the limiter's keys on either side.
func TestAMigratingSlotIsFollowed(t *testing.T) {
	redistest.Need(t)
	c, err := redistest.StartCluster(3, 0)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	rc := c.Client(t)
	cl, err := core.New(rc)
	require.NoError(t, err)
	for _, typ := range []core.RateType{core.Overall, core.PerClient} {
		l := cl.Limiter(uniqueName(t), core.WithRate(rate(typ, 100, time.Minute)))
		require.True(t, tryAcquire(t, l, 1))
		sl := slot.Of(core.Keys(l)[3])
		owners, err := c.Owners()
		require.NoError(t, err)
		from := owners[sl]
		to := c.Masters[0]
		if to == from {
			to = c.Masters[1]
		}
		id := func(s *redistest.Server) string {
			out, err := s.CLI("cluster", "myid")
			require.NoError(t, err)
			return strings.TrimSpace(out)
		}
		cli := func(s *redistest.Server, args ...string) {
			out, err := s.CLI(args...)
			require.NoError(t, err)
			require.NotContains(t, out, "ERR", "%v", args)
		}
		cli(to, "cluster", "setslot", strconv.Itoa(sl), "importing", id(from))
		cli(from, "cluster", "setslot", strconv.Itoa(sl), "migrating", id(to))
		ctx, cancel := context.WithTimeout(bg, time.Second)
		res, err := l.TryAcquire(ctx, 1)
		cancel()
		require.NoError(t, err, "%v: the keys are on the old master: it decides", typ)
		assert.True(t, res.Allowed)

		keys, err := from.CLI("cluster", "getkeysinslot", strconv.Itoa(sl), "100")
		require.NoError(t, err)
		args := []string{"migrate", "127.0.0.1", strconv.Itoa(to.Port), "", "0", "5000", "keys"}
		cli(from, append(args, strings.Fields(keys)...)...)
		ctx, cancel = context.WithTimeout(bg, time.Second)
		res, err = l.TryAcquire(ctx, 1)
		cancel()
		require.NoError(t, err, "%v: the keys moved: the new master decides", typ)
		assert.True(t, res.Allowed)
		assert.EqualValues(t, 97, res.Remaining, "the same limiter, moved")

		for _, m := range c.Masters {
			cli(m, "cluster", "setslot", strconv.Itoa(sl), "node", id(to))
		}
		ctx, cancel = context.WithTimeout(bg, 5*time.Second)
		res, err = l.TryAcquire(ctx, 1)
		cancel()
		require.NoError(t, err, "%v: the slot moved", typ)
		assert.EqualValues(t, 96, res.Remaining)
	}
}

// A retry time found past the oldest grants the script reads is a bound,
// never early but maybe late (grants past them may hold more than a
// permit): the local denial cache does not keep such a denial, which could
// refuse a request after its permits are back.
func TestABoundedRetryIsNotCached(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		r := rate(core.Overall, 1000, time.Minute)
		l := e.client(t).Limiter(e.name, core.WithRate(r))
		for range 16 {
			require.True(t, tryAcquire(t, l, 1))
		}
		for range 98 {
			require.True(t, tryAcquire(t, l, 10))
		}
		// 4 left; 100 wanted: past the 16 oldest grants.
		res, err := l.TryAcquire(bg, 100)
		require.NoError(t, err)
		require.False(t, res.Allowed)
		again, err := l.TryAcquire(bg, 100)
		require.NoError(t, err)
		assert.False(t, again.Cached, "a bound is not kept")
		assert.GreaterOrEqual(t, again.RetryAfter, time.Minute-5*time.Second, "never early: the 10th grant of 10 leaves in a minute")

		// Within the oldest grants, the time is exact and kept.
		res, err = l.TryAcquire(bg, 10)
		require.NoError(t, err)
		require.False(t, res.Allowed)
		again, err = l.TryAcquire(bg, 10)
		require.NoError(t, err)
		assert.True(t, again.Cached)
	})
}
