package core_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// A waiter's subscription hears the releases of other processes: the
// notice comes from Redis, not from this process.
func TestSemaphoreWaitersHearReleases(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		waiter := e.client(t)
		s := waiter.Semaphore(e.name, core.WithPermits(1))
		other := e.semaphore(t, core.WithPermits(1))
		l, _ := semAcquire(t, other, 1, time.Minute)
		next, leave := core.NoticeOf(waiter, s)
		defer leave()
		// The subscription is sent, not confirmed: wait until Redis
		// counts it before the release publishes.
		require.Eventually(t, func() bool { return subscribers(t, e, core.SemaphoreChannel(s)) == 1 },
			5*time.Second, 10*time.Millisecond)
		require.True(t, release(t, other, l))
		select {
		case <-next:
		case <-time.After(5 * time.Second):
			t.Fatal("no notice of the release")
		}
	})
}

// subscribers returns the number of subscribers of channel, sharded on a
// Cluster.
func subscribers(t testing.TB, e *env, channel string) int64 {
	t.Helper()
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		var n atomic.Int64 // the masters are asked at once
		err := cc.ForEachMaster(bg, func(ctx context.Context, m *redis.Client) error {
			v, err := m.PubSubShardNumSub(ctx, channel).Result()
			n.Add(v[channel])
			return err
		})
		require.NoError(t, err)
		return n.Load()
	}
	v, err := e.rdb.PubSubNumSub(bg, channel).Result()
	require.NoError(t, err)
	return v[channel]
}

// TryAcquireWithin waits for the permits another process releases, asks
// Redis at most a few times a second meanwhile, returns the refusal when
// its wait ends, and leaves the channel unsubscribed.
func TestSemaphoreTryAcquireWithin(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		asks := countCalls(e.rdb, e.name)
		s := e.semaphore(t, core.WithPermits(1))
		holder := e.semaphore(t, core.WithPermits(1))
		l, _ := semAcquire(t, holder, 1, time.Minute)

		// Full for the whole wait: the refusal, no error.
		start, before := time.Now(), asks.Load()
		w, r, err := s.TryAcquireWithin(bg, 1, time.Minute, time.Second)
		require.NoError(t, err)
		assert.False(t, r.Allowed)
		assert.True(t, w == (core.Lease{}))
		waited := time.Since(start)
		n := asks.Load() - before
		t.Logf("%d asks in a wait of %v", n, waited.Round(time.Millisecond))
		assert.LessOrEqual(t, n, 2+int64(waited/core.PollEvery), "the first ask, then one a poll at most")
		// The unsubscription is sent, not confirmed: Redis counts it soon.
		assert.Eventually(t, func() bool { return subscribers(t, e, core.SemaphoreChannel(s)) == 0 },
			5*time.Second, 10*time.Millisecond, "no waiter: unsubscribed")

		// Released meanwhile: granted.
		got := make(chan core.Result, 1)
		go func() {
			_, r, err := s.TryAcquireWithin(bg, 1, time.Minute, time.Minute)
			assert.NoError(t, err)
			got <- r
		}()
		time.Sleep(300 * time.Millisecond)
		require.True(t, release(t, holder, l))
		select {
		case r := <-got:
			assert.True(t, r.Allowed)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the permit released")
		}

		// A cancelled wait ends with ctx's error.
		semAcquire(t, holder, 1, time.Minute)
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(100*time.Millisecond, cancel)
		_, _, err = s.TryAcquireWithin(ctx, 1, time.Minute, time.Minute)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// countCalls counts the script calls whose arguments name name.
func countCalls(rdb redis.UniversalClient, name string) *atomic.Int64 {
	h := &callCounter{name: name}
	rdb.AddHook(h)
	return &h.n
}

type callCounter struct {
	name string
	n    atomic.Int64
}

func (*callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *callCounter) count(cmd redis.Cmder) {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, h.name) {
			h.n.Add(1)
			return
		}
	}
}
