package policy_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/internal/testkit/stall"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

var bg = context.Background()

// operated runs f on a redis-server and on a Redis Cluster, with two
// Clients (two processes) on one key prefix.
func operated(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient, one, two *core.Client)) {
	for _, backend := range []string{"redis", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			redistest.Need(t)
			var rdb redis.UniversalClient
			if backend == "redis" {
				rdb = redistest.Shared(t).Client(t)
			} else {
				rdb = redistest.SharedCluster(t).Client(t)
			}
			prefix := uniquePrefix(t)
			one, err := core.New(rdb, core.WithKeyPrefix(prefix))
			require.NoError(t, err)
			two, err := core.New(rdb, core.WithKeyPrefix(prefix))
			require.NoError(t, err)
			f(t, rdb, one, two)
		})
	}
}

// userReq is a request of user.
func userReq(user string) *req { return newReq("192.0.2.1:1").user(user) }

var byUser = policy.WithKey(keyfunc.User("user"))

// Peek says what the next request gets, taking nothing, for a rate and a
// concurrency limit.
func TestPeek(t *testing.T) {
	operated(t, func(t *testing.T, _ redis.UniversalClient, one, _ *core.Client) {
		p := policy.MustNew(one, "peek", core.PerMinute(2), byUser)
		for i := range 2 {
			r, err := p.Peek(bg, "alice")
			require.NoError(t, err)
			assert.True(t, r.Allowed)
			assert.EqualValues(t, 2-i, r.Remaining)
			d := decide(t, p, userReq("alice"), observe.Allowed, 0)
			assert.Equal(t, r.Remaining-1, d.Result.Remaining)
		}
		r, err := p.Peek(bg, "alice")
		require.NoError(t, err)
		assert.False(t, r.Allowed)
		d := decide(t, p, userReq("alice"), observe.Denied, http.StatusTooManyRequests)
		assert.InDelta(t, d.Result.RetryAfter, r.RetryAfter, float64(100*time.Millisecond), "the retry time the request gets")

		c := policy.MustNewConcurrency(one, "peekc", 2, byUser)
		held := decide(t, c, userReq("alice"), observe.Allowed, 0)
		defer held.Done(http.StatusOK)
		r, err = c.Peek(bg, "alice")
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		assert.EqualValues(t, 1, r.Remaining)
		_, err = c.Peek(bg, "")
		assert.ErrorIs(t, err, core.ErrInvalidName)
	})
}

// Peek tells a key's override in a process that has not read the
// overrides yet (one just started, such as a command's), for a rate and a
// concurrency limit.
func TestPeekReadsTheOverride(t *testing.T) {
	operated(t, func(t *testing.T, _ redis.UniversalClient, one, two *core.Client) {
		for _, mk := range []func(c *core.Client) *policy.Policy{
			func(c *core.Client) *policy.Policy { return policy.MustNew(c, "peekov", core.PerMinute(2), byUser) },
			func(c *core.Client) *policy.Policy { return policy.MustNewConcurrency(c, "peekovc", 2, byUser) },
		} {
			require.NoError(t, mk(one).SetOverride(bg, "gina", 9))
			r, err := mk(two).Peek(bg, "gina") // two's first policy of the name: no override read
			require.NoError(t, err)
			assert.EqualValues(t, 9, r.Rate.Permits)
			assert.EqualValues(t, 9, r.Remaining)
		}
	})
}

// A Reset in one process serves the key's next request in another within
// a second, though that one had just refused it (and keeps the refusal in
// memory).
func TestResetFromAnotherProcess(t *testing.T) {
	operated(t, func(t *testing.T, _ redis.UniversalClient, one, two *core.Client) {
		stalls := stall.Watch(t)
		here := policy.MustNew(one, "reset", core.PerMinute(1), byUser)
		there := policy.MustNew(two, "reset", core.PerMinute(1), byUser)
		decide(t, here, userReq("bob"), observe.Allowed, 0)
		decide(t, here, userReq("bob"), observe.Denied, http.StatusTooManyRequests)
		require.NoError(t, there.Reset(bg, "bob"))
		reset := time.Now()
		withinASecond(t, stalls, reset, "served", func() bool { return decideAgain(here, userReq("bob")).Status == 0 })
		t.Logf("served %v after the reset in another process", time.Since(reset).Round(time.Millisecond))

		c := policy.MustNewConcurrency(one, "resetc", 1, byUser)
		held := decide(t, c, userReq("bob"), observe.Allowed, 0)
		defer held.Done(http.StatusOK)
		decide(t, c, userReq("bob"), observe.Denied, http.StatusTooManyRequests)
		require.NoError(t, policy.MustNewConcurrency(two, "resetc", 1, byUser).Reset(bg, "bob"))
		decide(t, c, userReq("bob"), observe.Allowed, 0).Done(http.StatusOK)
	})
}

// Keys lists every key with state, as the key functions returned it,
// whatever its characters, the long ones by their hash; Peek and Reset
// take what it lists.
func TestKeys(t *testing.T) {
	operated(t, func(t *testing.T, _ redis.UniversalClient, one, _ *core.Client) {
		long := strings.Repeat("k", 100)
		users := []string{"alice", "b:c", "{x}", "with space", "é", long}
		for _, p := range []*policy.Policy{
			policy.MustNew(one, "keys", core.PerMinute(5), byUser),
			policy.MustNewConcurrency(one, "keysc", 5, byUser, policy.WithLease(time.Minute)),
		} {
			for _, u := range users {
				d := decide(t, p, userReq(u), observe.Allowed, 0)
				defer d.Done(http.StatusOK)
			}
			decide(t, p, newReq("192.0.2.7:1"), observe.Allowed, 0) // no user: its IP
			require.NoError(t, p.SetOverride(bg, "alice", 7))       // no key of its own
			var got []string
			for k, err := range p.Keys(bg) {
				require.NoError(t, err)
				got = append(got, k)
			}
			want := append(slices.Clone(users[:len(users)-1]), ":ip:192.0.2.7")
			slices.Sort(got)
			slices.Sort(want)
			hashed := slices.IndexFunc(got, func(k string) bool { return strings.HasPrefix(k, "~") })
			require.GreaterOrEqual(t, hashed, 0, "the long key, hashed: %q", got)
			h := got[hashed]
			got = slices.Delete(got, hashed, hashed+1)
			assert.Equal(t, want, got)
			for _, k := range append(want, h) {
				r, err := p.Peek(bg, k)
				require.NoError(t, err)
				assert.EqualValues(t, map[bool]int64{true: 6, false: 4}[k == "alice"], r.Remaining, "%q", k)
			}
			require.NoError(t, p.Reset(bg, h))
			r, err := p.Peek(bg, h)
			require.NoError(t, err)
			assert.EqualValues(t, 5, r.Remaining, "the long key reset")
		}
	})
}

// An override set in one process is applied in another within a second,
// in the headers too, and deleted the same way; the key keeps its history.
func TestOverrideFromAnotherProcess(t *testing.T) {
	operated(t, func(t *testing.T, _ redis.UniversalClient, one, two *core.Client) {
		stalls := stall.Watch(t)
		here := policy.MustNew(one, "over", core.PerMinute(2), byUser)
		there := policy.MustNew(two, "over", core.PerMinute(2), byUser)
		for range 2 {
			decide(t, here, userReq("carol"), observe.Allowed, 0)
		}
		decide(t, here, userReq("carol"), observe.Denied, http.StatusTooManyRequests)
		require.NoError(t, there.SetOverride(bg, "carol", 4))
		limit, ok, err := here.Override(bg, "carol")
		require.NoError(t, err)
		assert.True(t, ok)
		assert.EqualValues(t, 4, limit)
		set := time.Now()
		r := userReq("carol")
		var d policy.Decision
		withinASecond(t, stalls, set, "applied", func() bool { d = decideAgain(here, r); return d.Status == 0 })
		t.Logf("applied %v after it was set in another process", time.Since(set).Round(time.Millisecond))
		assert.Equal(t, `"over";q=4;w=60`, r.resp.Get("RateLimit-Policy"), "the override's limit in the headers")
		assert.EqualValues(t, 1, d.Result.Remaining, "the window's 2 grants count against the new limit")
		dave := userReq("dave")
		decide(t, here, dave, observe.Allowed, 0)
		assert.Equal(t, `"over";q=2;w=60`, dave.resp.Get("RateLimit-Policy"), "other keys keep the policy's limit")

		require.NoError(t, there.DeleteOverride(bg, "carol"))
		_, ok, err = here.Override(bg, "carol")
		require.NoError(t, err)
		assert.False(t, ok)
		deleted := time.Now()
		withinASecond(t, stalls, deleted, "deleted", func() bool { return decideAgain(here, userReq("carol")).Status != 0 })

		c := policy.MustNewConcurrency(one, "overc", 1, byUser)
		require.NoError(t, c.SetOverride(bg, "carol", 3))
		for range 3 {
			defer decide(t, c, userReq("carol"), observe.Allowed, 0).Done(http.StatusOK)
		}
		decide(t, c, userReq("carol"), observe.Denied, http.StatusTooManyRequests)
		assert.ErrorIs(t, c.SetOverride(bg, "carol", 0), core.ErrInvalidPermits)
		assert.ErrorIs(t, c.SetOverride(bg, "carol", 10_001), core.ErrInvalidPermits)
	})
}

// A decision sends the same commands with an override as without: the
// override is in memory, read twice a second, not per request.
func TestAnOverrideCostsADecisionNothing(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	rdb := srv.Client(t)
	c, err := core.New(rdb)
	require.NoError(t, err)
	p := policy.MustNew(c, "cost", core.PerMinute(1000), byUser)
	commands := func(user string) map[string]int64 {
		require.NoError(t, rdb.ConfigResetStat(bg).Err())
		for range 50 {
			decide(t, p, userReq(user), observe.Allowed, 0)
		}
		info, err := rdb.Info(bg, "commandstats").Result()
		require.NoError(t, err)
		out := map[string]int64{}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if !ok || name == "hget" || name == "hgetall" || name == "info" || name == "config|resetstat" {
				continue // hget, hgetall: the overrides' watch, on its own time
			}
			n, _, _ := strings.Cut(rest, ",")
			out[name], _ = strconv.ParseInt(n, 10, 64)
		}
		return out
	}
	decide(t, p, userReq("warm"), observe.Allowed, 0) // the scripts loaded
	without := commands("plain")
	require.NoError(t, p.SetOverride(bg, "special", 2000))
	with := commands("special")
	assert.Equal(t, without, with)
	t.Logf("50 decisions, with or without an override: %v", with)
}

// An override applies while Redis is down, at the process's share.
func TestAnOverrideOutlivesRedis(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	c, err := core.New(srv.Client(t))
	require.NoError(t, err)
	p := policy.MustNew(c, "down", core.PerMinute(2), byUser, policy.WithFailLocal(2))
	require.NoError(t, p.SetOverride(bg, "erin", 6))
	require.NoError(t, srv.Stop())
	for range 3 { // a share of 3 of the override's 6
		decide(t, p, userReq("erin"), observe.FallbackAllowed, 0)
	}
	decide(t, p, userReq("erin"), observe.FallbackDenied, http.StatusTooManyRequests)
	decide(t, p, userReq("frank"), observe.FallbackAllowed, 0) // a share of 1 of the policy's 2
	decide(t, p, userReq("frank"), observe.FallbackDenied, http.StatusTooManyRequests)
}

// A quota has Peek, Reset, Keys and overrides too.
func TestOperateAQuota(t *testing.T) {
	operated(t, func(t *testing.T, _ redis.UniversalClient, one, _ *core.Client) {
		p := policy.MustNewQuota(one, "daily", core.Quota{Limit: 2, Period: core.Day}, byUser)
		for range 2 {
			decide(t, p, userReq("gus"), observe.Allowed, 0)
		}
		decide(t, p, userReq("gus"), observe.Denied, http.StatusTooManyRequests)
		r, err := p.Peek(bg, "gus")
		require.NoError(t, err)
		assert.False(t, r.Allowed)
		assert.Positive(t, r.RetryAfter, "until midnight")
		var keys []string
		for k, err := range p.Keys(bg) {
			require.NoError(t, err)
			keys = append(keys, k)
		}
		assert.Equal(t, []string{"gus"}, keys)
		require.NoError(t, p.SetOverride(bg, "gus", 3))
		decide(t, p, userReq("gus"), observe.Allowed, 0)
		decide(t, p, userReq("gus"), observe.Denied, http.StatusTooManyRequests)
		require.NoError(t, p.Reset(bg, "gus"))
		r, err = p.Peek(bg, "gus")
		require.NoError(t, err)
		assert.EqualValues(t, 3, r.Remaining, "reset: the whole override left")
	})
}

// withinASecond calls done every 20 ms until it returns true. It fails if
// a call made a second or more after start, less the test process's
// stalls meanwhile, returned false: what changed at start reaches every
// process within a second.
func withinASecond(t *testing.T, stalls *stall.Monitor, start time.Time, what string, done func() bool) {
	t.Helper()
	for {
		at := time.Now()
		if done() {
			return
		}
		require.Less(t, at.Sub(start)-stalls.During(start, at), time.Second, "%s within a second", what)
		time.Sleep(20 * time.Millisecond)
	}
}
