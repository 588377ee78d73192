package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// counting counts the commands go-redis is asked to send.
type counting struct{ n atomic.Int64 }

func (c *counting) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counting) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *counting) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// While Redis fails, a Client sends one call a second, the probe, and fails
// the others at once with ErrUnavailable, so that an outage costs no one a
// timeout; the first probe that Redis answers ends it.
func TestAFailingRedisIsProbedOnceASecond(t *testing.T) {
	redistest.Need(t)
	s, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	sent := &counting{}
	rdb.AddHook(sent)
	c, err := core.New(rdb)
	require.NoError(t, err)
	l := c.Limiter(uniqueName(t), core.WithRate(rate(core.Overall, 1000, time.Minute)), core.WithCallTimeout(100*time.Millisecond))
	require.True(t, tryAcquire(t, l, 1))

	require.NoError(t, s.Stop())
	for range 2 { // the failure, then the probe made at once
		_, err := l.TryAcquire(bg, 1)
		require.Error(t, err)
	}
	before, start := sent.n.Load(), time.Now()
	calls, slowest := 0, time.Duration(0)
	for time.Since(start) < 2500*time.Millisecond {
		t0 := time.Now()
		_, err := l.TryAcquire(bg, 1)
		require.Error(t, err)
		if errors.Is(err, core.ErrUnavailable) {
			slowest = max(slowest, time.Since(t0))
		}
		calls++
		time.Sleep(5 * time.Millisecond)
	}
	probes := sent.n.Load() - before
	t.Logf("%d calls in 2.5 s of outage: %d sent (probes), the others failed at once (slowest %v)", calls, probes, slowest)
	assert.GreaterOrEqual(t, probes, int64(2), "one probe a second")
	assert.LessOrEqual(t, probes, int64(3), "one probe a second; the other calls fail with no round trip")

	require.NoError(t, s.Restart())
	back := time.Now()
	require.Eventually(t, func() bool {
		res, err := l.TryAcquire(bg, 1)
		return err == nil && res.Allowed
	}, 5*time.Second, 10*time.Millisecond)
	took := time.Since(back)
	t.Logf("decisions back %v after Redis answered again", took.Round(time.Millisecond))
	assert.Less(t, took, 1500*time.Millisecond, "the next probe, within a second")
}

// Check says, at start, what keeps Redis from deciding, and what to do.
func TestCheckSaysWhatIsWrong(t *testing.T) {
	redistest.Need(t)
	start := func(args ...string) *redistest.Server {
		s, err := redistest.Start(args...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop() })
		return s
	}
	check := func(opts *redis.Options) error {
		opts.MaxRetries = -1
		rdb := redis.NewClient(opts)
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := core.New(rdb)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		return c.Check(ctx)
	}

	plain := start()
	assert.NoError(t, check(&redis.Options{Addr: plain.Addr}), "a master that runs scripts")

	gone := start()
	require.NoError(t, gone.Stop())
	err := check(&redis.Options{Addr: gone.Addr})
	assert.ErrorIs(t, err, core.ErrUnavailable)
	assert.ErrorContains(t, err, "redis at "+gone.Addr+" is unreachable")

	locked := start()
	_, err = locked.CLI("config", "set", "requirepass", "s3cret")
	require.NoError(t, err)
	err = check(&redis.Options{Addr: locked.Addr})
	assert.ErrorIs(t, err, core.ErrUnavailable)
	assert.ErrorContains(t, err, "requires a password: set Password")
	err = check(&redis.Options{Addr: locked.Addr, Password: "wrong"})
	assert.ErrorContains(t, err, "refused the username or password")
	assert.NoError(t, check(&redis.Options{Addr: locked.Addr, Password: "s3cret"}))

	replica := start("--replicaof", "127.0.0.1", portOf(plain.Addr))
	err = check(&redis.Options{Addr: replica.Addr})
	assert.ErrorIs(t, err, core.ErrUnavailable)
	assert.ErrorContains(t, err, "is a read-only replica")

	noRole := start("--rename-command", "ROLE", `""`)
	assert.NoError(t, check(&redis.Options{Addr: noRole.Addr}), "a server without ROLE: its role is not known")
	assert.NoError(t, check(&redis.Options{Addr: miniredis.RunT(t).Addr()}), "the examples' embedded Redis")

	_, err = plain.CLI("acl", "setuser", "norole", "on", ">pw", "~*", "+@all", "-role")
	require.NoError(t, err)
	assert.NoError(t, check(&redis.Options{Addr: plain.Addr, Username: "norole", Password: "pw"}), "a user not allowed ROLE")
	_, err = plain.CLI("acl", "setuser", "noscript", "on", ">pw", "~*", "+@all", "-script")
	require.NoError(t, err)
	err = check(&redis.Options{Addr: plain.Addr, Username: "noscript", Password: "pw"})
	assert.ErrorIs(t, err, core.ErrUnavailable)
	assert.ErrorContains(t, err, "does not let this user run SCRIPT LOAD: grant it")

	noScripts := start("--rename-command", "SCRIPT", `""`)
	err = check(&redis.Options{Addr: noScripts.Addr})
	assert.ErrorIs(t, err, core.ErrUnavailable)
	assert.ErrorContains(t, err, "has SCRIPT LOAD disabled")
	t.Logf("what Check says: %v", err)
}

// Check on a Sentinel (failover) client names the master Sentinel gave it.
func TestCheckNamesTheSentinelMaster(t *testing.T) {
	redistest.Need(t)
	d, err := redistest.StartSentinel()
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	_, err = d.Master.CLI("acl", "setuser", "noscript", "on", ">pw", "~*", "+@all", "-script")
	require.NoError(t, err)
	check := func(user, password string) error {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: d.Name, SentinelAddrs: d.SentinelAddrs(),
			Username: user, Password: password, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := core.New(rdb)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		return c.Check(ctx)
	}
	assert.NoError(t, check("", ""))
	err = check("noscript", "pw")
	assert.ErrorIs(t, err, core.ErrUnavailable)
	assert.ErrorContains(t, err, "redis at "+d.Master.Addr+" (the master Sentinel names) does not let this user run SCRIPT LOAD")
	assert.NotContains(t, err.Error(), "FailoverClient")
}

func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return addr
}
