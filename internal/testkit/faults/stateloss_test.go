package faults_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/faultproxy"
	"github.com/redlimit/redlimit/policy"
)

// TestStateLoss runs the faults that lose state rather than time: a reply
// lost after Redis ran the script, the script cache flushed, the data
// flushed, keys evicted. They assert what is decided, not how fast, so
// they run in parallel, each with its own redis-server, and the policies
// get a 2 s timeout: a decision that misses 100 ms on a loaded machine is
// not what these tests are about, and any error left is a real one.
func TestStateLoss(t *testing.T) {
	noLeaks(t) // runs after every parallel subtest and its cleanups
	t.Run("lost reply, core, go-redis resends", lostReplyResent)
	t.Run("lost reply, core, the call times out", lostReplyTimedOut)
	t.Run("lost reply, middleware", lostReplyMiddleware)
	t.Run("script cache flushed", scriptFlush)
	t.Run("data flushed", flushAll)
	t.Run("keys evicted", eviction)
}

const stateTimeout = 2 * time.Second

var bg = context.Background()

// isGrant matches the reply of one acquire that granted, for a limiter with
// a rate in code: {now, remaining}, remaining >= 0 (a denial is longer).
func isGrant(reply []byte) bool {
	rest, ok := bytes.CutPrefix(reply, []byte("*2\r\n:"))
	if !ok {
		return false
	}
	_, remaining, ok := bytes.Cut(rest, []byte("\r\n:"))
	return ok && len(remaining) > 0 && remaining[0] != '-'
}

// info returns the fields of an INFO section.
func info(t *testing.T, rdb *redis.Client, section string) map[string]string {
	t.Helper()
	s, err := rdb.Info(bg, section).Result()
	require.NoError(t, err)
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// stat returns field f of an INFO value such as "calls=2,usec=10", or 0.
func stat(v, f string) int64 {
	for _, kv := range strings.Split(v, ",") {
		if k, n, ok := strings.Cut(kv, "="); ok && k == f {
			i, _ := strconv.ParseInt(n, 10, 64)
			return i
		}
	}
	return 0
}

// scriptRuns returns how many times Redis ran a script (EVALSHA or EVAL).
func scriptRuns(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	m := info(t, rdb, "commandstats")
	return stat(m["cmdstat_evalsha"], "calls") + stat(m["cmdstat_eval"], "calls")
}

// lostReplySetup is a redis-server, a proxy in front of it, a direct client
// for checks, and a limiter of rate 3 per minute through the proxy, whose
// connection is made and script loaded, so the next reply the proxy sees
// for it is the acquire's.
func lostReplySetup(t *testing.T, o *redis.Options) (*faultproxy.Proxy, *redis.Client, *core.Client) {
	t.Helper()
	s := startRedis(t)
	p := startProxy(t, s.Addr)
	o.Addr = p.Addr()
	c := newClient(t, newRedis(t, o))
	warm := c.Limiter("warm", core.WithRate(core.PerMinute(3)))
	_, err := warm.TryAcquire(bg, 1)
	require.NoError(t, err)
	direct := newRedis(t, &redis.Options{Addr: s.Addr})
	return p, direct, c
}

// consumed checks with AvailablePermits and the log (ZCARD of the permits
// sorted set) that l, of rate 3, holds want grants.
func consumed(t *testing.T, direct *redis.Client, c *core.Client, l *core.Limiter, want int64) {
	t.Helper()
	avail, err := c.Limiter(l.Name(), core.WithRate(core.PerMinute(3))).AvailablePermits(bg)
	require.NoError(t, err)
	assert.Equal(t, 3-want, avail, "available permits")
	n, err := direct.ZCard(bg, "{"+l.Name()+"}:permits").Result()
	require.NoError(t, err)
	assert.Equal(t, want, n, "grants in the log")
}

// The reply of a granted acquire is lost; go-redis times the read out
// (ReadTimeout 300 ms), drops the connection and sends the same EVALSHA
// again on a new one, with the same log member: Redis runs the script
// twice, the permit is consumed once.
func lostReplyResent(t *testing.T) {
	t.Parallel()
	p, direct, c := lostReplySetup(t, &redis.Options{ReadTimeout: 300 * time.Millisecond})
	l := c.Limiter("lost:resent", core.WithRate(core.PerMinute(3)))
	runs := scriptRuns(t, direct)
	p.DropReplies(1, isGrant)
	r, err := l.TryAcquire(bg, 1)
	require.NoError(t, err, "go-redis resent the call")
	require.EqualValues(t, 1, p.Dropped(), "the grant's reply was dropped")
	assert.True(t, r.Allowed)
	assert.EqualValues(t, 2, r.Remaining, "the resend reports the first grant, not a second")
	runs = scriptRuns(t, direct) - runs
	assert.GreaterOrEqual(t, runs, int64(2), "Redis ran the script again")
	consumed(t, direct, c, l, 1)
	t.Logf("Redis ran the script %d times for the call; 1 permit consumed", runs)
}

// The reply is lost and the call's own timeout (100 ms, with go-redis
// applying context deadlines to reads) ends it first: the caller gets an
// error, Redis granted once, and nothing is resent.
func lostReplyTimedOut(t *testing.T) {
	t.Parallel()
	p, direct, c := lostReplySetup(t, &redis.Options{ContextTimeoutEnabled: true})
	l := c.Limiter("lost:timeout", core.WithRate(core.PerMinute(3)), core.WithCallTimeout(timeout))
	p.DropReplies(1, isGrant)
	_, err := l.TryAcquire(bg, 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	waitFor(t, 5*time.Second, "the reply to reach the proxy", func() bool { return p.Dropped() == 1 })
	consumed(t, direct, c, l, 1)
	// The next call, without the 100 ms bound (the tests around may load
	// the machine), sees the lost grant.
	r, err := c.Limiter(l.Name(), core.WithRate(core.PerMinute(3))).TryAcquire(bg, 1)
	require.NoError(t, err)
	assert.True(t, r.Allowed)
	assert.EqualValues(t, 1, r.Remaining, "the lost grant counts, once")
}

// Through the middleware: one request whose grant reply is lost is served
// once go-redis has resent it, with the headers of the single grant, and
// the limit then allows exactly two more requests.
func lostReplyMiddleware(t *testing.T) {
	t.Parallel()
	p, direct, c := lostReplySetup(t, &redis.Options{ReadTimeout: 300 * time.Millisecond})
	a := newApp(t, c, "lost", core.PerMinute(3), policy.WithTimeout(stateTimeout))
	client := ip(1, 2, 3)
	p.DropReplies(1, isGrant)
	r := a.do(client)
	require.EqualValues(t, 1, p.Dropped())
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "2", r.header.Get("X-RateLimit-Remaining"), "one permit taken")
	consumed(t, direct, c, c.Limiter("lost:"+client), 1)
	assert.Equal(t, []int{200, 200, 429}, []int{a.do(client).status, a.do(client).status, a.do(client).status},
		"3 permits: the resent request took one")
	assert.Empty(t, a.failures())
}

// checkAllDecided asserts that every request of a was decided by Redis
// (allowed or denied, with headers) and that no error reached the error
// handler.
func checkAllDecided(t *testing.T, a *app) []rec {
	t.Helper()
	rs := a.records()
	undecided := 0
	for _, r := range rs {
		require.Nil(t, r.panic, "panic in the middleware")
		if !r.decided() {
			undecided++
		}
	}
	assert.Zero(t, undecided, "requests not decided")
	for _, f := range a.failures() {
		assert.NotErrorIs(t, f.err, core.ErrNotInitialized)
		assert.NoError(t, f.err, "no error may reach the error handler")
	}
	return rs
}

// SCRIPT FLUSH under load, five times: EVALSHA fails with NOSCRIPT, the
// core sends the script (EVAL), and no request notices.
func scriptFlush(t *testing.T) {
	t.Parallel()
	s := startRedis(t)
	direct := newRedis(t, &redis.Options{Addr: s.Addr})
	a := newApp(t, newClient(t, newRedis(t, &redis.Options{Addr: s.Addr})), "noscript",
		core.PerMinute(permits), policy.WithTimeout(stateTimeout))
	stop := a.load(workers, pause, loadKeys)
	defer stop()
	waitFor(t, 10*time.Second, "100 requests", func() bool { return a.count() >= 100 })
	evals := stat(info(t, direct, "commandstats")["cmdstat_eval"], "calls")
	for i := 0; i < 5; i++ {
		require.NoError(t, direct.ScriptFlush(bg).Err())
		n := a.count()
		waitFor(t, 10*time.Second, "requests after the flush", func() bool { return a.count() >= n+50 })
	}
	stop()
	rs := checkAllDecided(t, a)
	after := stat(info(t, direct, "commandstats")["cmdstat_eval"], "calls")
	noscript := stat(info(t, direct, "errorstats")["errorstat_NOSCRIPT"], "count")
	assert.GreaterOrEqual(t, after-evals, int64(5), "the script was sent again after each flush")
	assert.GreaterOrEqual(t, noscript, int64(5), "EVALSHA met NOSCRIPT")
	t.Logf("%d requests, all decided; %d NOSCRIPT replies, %d EVALs after the first flush", len(rs), noscript, after-evals)
}

// FLUSHALL under load on limiters that are kept saturated: the next
// request recreates each limiter's rate (no "not initialized"), and the
// loss of the window shows only as the bounded over-issue: at most 2P
// grants in a window that overlaps the flush, at most P in any window that
// starts after it.
//
// Core results carry no public time, so grant times are bounded with the
// local clock: Redis decided each request between its start and its end.
// A set of grants whose requests all started at or after s and ended
// before s + interval - 1 ms were decided within less than one interval
// (the 1 ms for Redis's millisecond timestamps): they are in one window,
// whatever the exact times. Counting such sets for every s = a grant's
// start never reports a violation that did not happen.
func flushAll(t *testing.T) {
	t.Parallel()
	const (
		p        = 10
		interval = time.Second
		limiters = 4
	)
	s := startRedis(t)
	direct := newRedis(t, &redis.Options{Addr: s.Addr})
	a := newApp(t, newClient(t, newRedis(t, &redis.Options{Addr: s.Addr})), "flush",
		core.Rate{Permits: p, Interval: interval}, policy.WithTimeout(stateTimeout))
	stop := a.load(workers, pause, func(w, _ int) string { return ip(150, w%limiters, 0) })
	defer stop()
	time.Sleep(1500 * time.Millisecond) // saturated windows before the flush
	flushStart := time.Now()
	require.NoError(t, direct.FlushAll(bg).Err())
	flushEnd := time.Now()
	time.Sleep(2 * interval) // two windows after it
	stop()

	rs := checkAllDecided(t, a)
	grants := map[string][]rec{}
	for _, r := range rs {
		if r.status == http.StatusOK {
			grants[r.key] = append(grants[r.key], r)
		}
	}
	require.Len(t, grants, limiters)
	var maxOverlap, maxAfter int
	for key, g := range grants {
		for i, first := range g { // g is sorted by start
			n := 0
			for _, r := range g[i:] {
				if r.end.Before(first.start.Add(interval - time.Millisecond)) {
					n++
				}
			}
			if first.start.After(flushEnd) {
				maxAfter = max(maxAfter, n)
				assert.LessOrEqual(t, n, p, "%s: %d grants in one window after the flush", key, n)
			} else {
				maxOverlap = max(maxOverlap, n)
				assert.LessOrEqual(t, n, 2*p, "%s: %d grants in one window", key, n)
			}
		}
		// The config is back, as the code gives it.
		cfg, err := direct.HMGet(bg, "flush:"+key, "rate", "interval").Result()
		require.NoError(t, err)
		assert.Equal(t, []any{"10", "1000"}, cfg, key)
	}
	assert.Greater(t, maxAfter, 0, "grants after the flush were checked")
	t.Logf("%d requests in %v, FLUSHALL took %v; most grants in one window of %v: %d from windows overlapping the flush (bound 2P = %d), %d after it (bound P = %d)",
		len(rs), rs[len(rs)-1].end.Sub(rs[0].start).Round(time.Millisecond), flushEnd.Sub(flushStart).Round(time.Millisecond),
		interval, maxOverlap, 2*p, maxAfter, p)
}

// Keys evicted: a redis-server with little room (allkeys-lru, maxmemory
// set 512 KiB above its usage once the load runs) and a load of new
// clients, whose limiters keep evicting one another's keys. Every request
// is still decided, with no error (no "not initialized", no Lua or OOM
// error), and a client whose keys were all evicted starts over with a full
// limit.
func eviction(t *testing.T) {
	t.Parallel()
	s := startRedis(t, "--maxmemory-policy", "allkeys-lru")
	direct := newRedis(t, &redis.Options{Addr: s.Addr})
	a := newApp(t, newClient(t, newRedis(t, &redis.Options{Addr: s.Addr})), "evict",
		core.PerMinute(permits), policy.WithTimeout(stateTimeout))
	stop := a.load(workers, pause, loadKeys)
	defer stop()
	waitFor(t, 10*time.Second, "100 requests", func() bool { return a.count() >= 100 })

	// A client that used its whole limit (and was not denied yet: no
	// denial is cached for it).
	tracked := ip(250, 0, 1)
	for i := 0; i < permits; i++ {
		require.Equal(t, http.StatusOK, a.do(tracked).status)
	}
	keys := []string{"evict:" + tracked, "{evict:" + tracked + "}:value", "{evict:" + tracked + "}:permits"}
	n, err := direct.Exists(bg, keys...).Result()
	require.NoError(t, err)
	require.EqualValues(t, 3, n)

	// Now the memory runs out: the connections and the script are in.
	used, err := strconv.ParseInt(info(t, direct, "memory")["used_memory"], 10, 64)
	require.NoError(t, err)
	maxmemory := used + 512<<10
	require.NoError(t, direct.ConfigSet(bg, "maxmemory", strconv.FormatInt(maxmemory, 10)).Err())
	waitFor(t, 30*time.Second, "the tracked client's keys to be evicted", func() bool {
		n, err := direct.Exists(bg, keys...).Result() // EXISTS does not touch the LRU clock
		return err == nil && n == 0
	})
	evictedAt := a.count()
	waitFor(t, 10*time.Second, "more requests under eviction", func() bool { return a.count() >= evictedAt+500 })
	stop()
	r := a.do(tracked)
	assert.Equal(t, http.StatusOK, r.status, "evicted: the client starts over")
	assert.Equal(t, strconv.Itoa(permits-1), r.header.Get("X-RateLimit-Remaining"), "with a full limit")

	rs := checkAllDecided(t, a)
	evicted, _ := strconv.ParseInt(info(t, direct, "stats")["evicted_keys"], 10, 64)
	dbsize, err := direct.DBSize(bg).Result()
	require.NoError(t, err)
	assert.Positive(t, evicted)
	t.Logf("%d requests, all decided; %d keys evicted, %d left (maxmemory %d KiB)", len(rs), evicted, dbsize, maxmemory>>10)
}
