package core_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// The common case, an allowed acquire on an overall rate given in code
// with no grant leaving the window since the limiter's last grant, runs
// five Redis commands: EVALSHA, TIME, HMGET (the config, and when the
// next upkeep is due), DECRBY and ZADD. Counted by Redis, in INFO
// commandstats.
func TestAGrantIsFiveCommands(t *testing.T) {
	rdb := redistest.Own(t)
	c, err := core.New(rdb)
	require.NoError(t, err)
	r := core.PerMinute(1_000)
	var ls []*core.Limiter
	for i := range 50 {
		l := c.Limiter(uniqueName(t)+strconv.Itoa(i), core.WithRate(r))
		require.True(t, tryAcquire(t, l, 1)) // a new limiter, with its upkeep times
		ls = append(ls, l)
	}
	require.NoError(t, rdb.ConfigResetStat(bg).Err())
	for range 4 {
		for _, l := range ls {
			require.True(t, tryAcquire(t, l, 1))
		}
	}
	calls := commandCalls(t, rdb)
	delete(calls, "config|resetstat")
	const n = 4 * 50
	assert.Equal(t, map[string]int64{"evalsha": n, "time": n, "hmget": n, "decrby": n, "zadd": n}, calls)
}

// A grant after one left the window, as on a steady trickle, runs eight:
// EVALSHA, TIME, HMGET, ZRANGE (the oldest grants, with their times),
// INCRBY (the permits back and the grant's, in one), ZADD,
// ZREMRANGEBYRANK (the grant that left) and HSET (the upkeep times). The
// keys are written here, so that no clock decides which path runs.
func TestAGrantAfterOneLeftIsEightCommands(t *testing.T) {
	rdb := redistest.Own(t)
	c, err := core.New(rdb)
	require.NoError(t, err)
	r := core.Rate{Permits: 1_000, Interval: time.Minute, KeepAlive: time.Hour} // no TTL due
	l := c.Limiter(uniqueName(t), core.WithRate(r))
	first, err := l.TryAcquire(bg, 1)
	require.NoError(t, err)
	require.True(t, first.Allowed)
	// A grant of a permit older than the window, counted, and the config's
	// time for the oldest grant to leave (exitAt) past.
	keys := core.Keys(l)
	old := core.DecisionTime(first).Add(-r.Interval - time.Second).UnixMilli()
	require.NoError(t, rdb.ZAdd(bg, keys[3], redis.Z{Score: float64(old), Member: core.Member(1)}).Err())
	require.NoError(t, rdb.DecrBy(bg, keys[1], 1).Err())
	require.NoError(t, rdb.HSet(bg, keys[0], "exitAt", old+r.Interval.Milliseconds()).Err())

	require.NoError(t, rdb.ConfigResetStat(bg).Err())
	res, err := l.TryAcquire(bg, 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	assert.EqualValues(t, 998, res.Remaining, "the first grant and this one out, the old one back")
	calls := commandCalls(t, rdb)
	delete(calls, "config|resetstat")
	assert.Equal(t, map[string]int64{"evalsha": 1, "time": 1, "hmget": 1, "zrange": 1, "incrby": 1, "zadd": 1,
		"zremrangebyrank": 1, "hset": 1}, calls)
	assert.EqualValues(t, 2, rdb.ZCard(bg, keys[3]).Val(), "the old grant dropped")
}

// A grant that left the window is given back by the next acquire, exactly:
// its Remaining counts it, and the log and counter agree.
func TestGrantsThatLeftAreGivenBackAtOnce(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		const interval = 300 * time.Millisecond
		l := e.client(t, core.WithDenialCache(0)).Limiter(e.name, core.WithRate(rate(core.Overall, 3, interval)))
		first, err := l.TryAcquire(bg, 2)
		require.NoError(t, err)
		require.True(t, first.Allowed)
		time.Sleep(interval / 3)
		second, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		require.True(t, second.Allowed)
		assert.Zero(t, second.Remaining)
		// Past the first grant's window, not the second's, by Redis's clock.
		for {
			now, err := e.rdb.Time(bg).Result()
			require.NoError(t, err)
			if now.After(core.DecisionTime(first).Add(interval)) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		res, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		if !assert.Less(t, core.DecisionTime(res).Sub(core.DecisionTime(second)), interval, "the second grant still in the window") {
			return
		}
		assert.EqualValues(t, 1, res.Remaining, "3 - 1 - 1: the first grant's 2 are back")
		n, err := e.rdb.ZCard(bg, core.Keys(l)[3]).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 2, n, "the first grant left the log")
		assert.EqualValues(t, 1, available(t, l))
	})
}
