package core_test

// The Semaphore: at most its permits held at once, leases ended and taken
// back by Redis's clock, Release and Renew safe to send twice, Renew
// holding again what Redis lost, keys that always expire, a poisoned key
// failing alone. Each test runs on miniredis in virtual time, a real
// redis-server and a Redis Cluster, but where it says otherwise; on the
// real servers, times are judged by Redis's clock (TIME before and after
// a call bound the time its script read).

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// semaphore returns the test's semaphore on a new Client.
func (e *env) semaphore(t testing.TB, opts ...core.SemaphoreOption) *core.Semaphore {
	t.Helper()
	return e.client(t).Semaphore(e.name, opts...)
}

// semAcquire asserts that TryAcquire returns no error.
func semAcquire(t testing.TB, s *core.Semaphore, permits int64, lease time.Duration) (core.Lease, core.Result) {
	t.Helper()
	l, r, err := s.TryAcquire(bg, permits, lease)
	require.NoError(t, err)
	require.Equal(t, r.Allowed, l != (core.Lease{}), "a lease is given with the permits, and only then")
	return l, r
}

// semAvailable asserts that Available returns no error.
func semAvailable(t testing.TB, s *core.Semaphore) int64 {
	t.Helper()
	n, err := s.Available(bg)
	require.NoError(t, err)
	return n
}

// release asserts that Release returns no error.
func release(t testing.TB, s *core.Semaphore, l core.Lease) bool {
	t.Helper()
	ok, err := s.Release(bg, l)
	require.NoError(t, err)
	return ok
}

// renew asserts that Renew returns no error.
func renew(t testing.TB, s *core.Semaphore, l core.Lease, lease time.Duration) bool {
	t.Helper()
	ok, err := s.Renew(bg, l, lease)
	require.NoError(t, err)
	return ok
}

// redisMs returns Redis's clock in whole ms, as the scripts read it.
func redisMs(t testing.TB, e *env) int64 {
	t.Helper()
	now, err := e.rdb.Time(bg).Result()
	require.NoError(t, err)
	return now.UnixMilli()
}

// leaseEnds returns the scores of the semaphore's leases, the soonest
// first.
func leaseEnds(t testing.TB, e *env, s *core.Semaphore) []int64 {
	t.Helper()
	zs, err := e.rdb.ZRangeWithScores(bg, core.SemaphoreKeys(s)[1], 0, -1).Result()
	require.NoError(t, err)
	ends := make([]int64, len(zs))
	for i, z := range zs {
		ends[i] = int64(z.Score)
	}
	return ends
}

// counter returns the semaphore's counter as stored.
func counter(t testing.TB, e *env, s *core.Semaphore) int64 {
	t.Helper()
	v, err := e.rdb.Get(bg, core.SemaphoreKeys(s)[0]).Int64()
	require.NoError(t, err)
	return v
}

// wipe deletes the semaphore's keys, as a Redis restarted empty has none.
func wipe(t testing.TB, e *env, s *core.Semaphore) {
	t.Helper()
	if e.mr != nil {
		e.mr.FlushAll()
		return
	}
	for _, k := range core.SemaphoreKeys(s) {
		require.NoError(t, e.rdb.Del(bg, k).Err())
	}
}

// Many goroutines on two Clients (two processes) never hold more than
// the semaphore's permits at once, and every permit comes back.
func TestSemaphoreAtMostNHeld(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		const limit = 3
		sems := []*core.Semaphore{
			e.client(t).Semaphore(e.name, core.WithPermits(limit)),
			e.client(t).Semaphore(e.name, core.WithPermits(limit)),
		}
		var held, most, grants atomic.Int64
		var wg sync.WaitGroup
		for w := range 12 {
			wg.Go(func() {
				s := sems[w%2]
				for range 25 {
					permits := 1 + int64(w%2)
					l, r, err := s.TryAcquire(bg, permits, 10*time.Second)
					if err != nil {
						t.Error(err)
						return
					}
					if !r.Allowed {
						time.Sleep(time.Millisecond)
						continue
					}
					// Counted after Redis granted, and uncounted before the
					// release: never more than Redis holds.
					n := held.Add(permits)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					grants.Add(1)
					time.Sleep(time.Millisecond)
					held.Add(-permits)
					if ok, err := s.Release(bg, l); err != nil || !ok {
						t.Error("release", ok, err)
						return
					}
				}
			})
		}
		wg.Wait()
		assert.LessOrEqual(t, most.Load(), int64(limit))
		assert.Positive(t, grants.Load())
		t.Logf("%d grants, at most %d permits held at once", grants.Load(), most.Load())
		assert.EqualValues(t, limit, semAvailable(t, sems[0]), "every permit came back")
		assert.Empty(t, leaseEnds(t, e, sems[0]))
	})
}

// A refusal says when enough leases end for the permits asked, by Redis's
// clock: the soonest for one, the second soonest for two.
func TestSemaphoreRefusalRetryAfter(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(2))
		semAcquire(t, s, 1, time.Second)
		time.Sleep(200 * time.Millisecond)
		semAcquire(t, s, 1, time.Second)
		ends := leaseEnds(t, e, s)
		require.Len(t, ends, 2)
		for permits := int64(1); permits <= 2; permits++ {
			before := redisMs(t, e)
			l, r := semAcquire(t, s, permits, time.Second)
			after := redisMs(t, e)
			require.False(t, r.Allowed)
			assert.True(t, l == (core.Lease{}))
			assert.Zero(t, r.Remaining)
			end := ends[permits-1]
			assert.GreaterOrEqual(t, r.RetryAfter, time.Duration(end-after)*time.Millisecond, "%d permits", permits)
			assert.LessOrEqual(t, r.RetryAfter, time.Duration(end-before)*time.Millisecond, "%d permits", permits)
			if e.virtual() {
				assert.Equal(t, time.Duration(permits-1)*200*time.Millisecond+800*time.Millisecond, r.RetryAfter)
			}
		}
	})
}

// Release gives the permits back at once; a second Release, or a Release
// of a lease that ended, changes nothing and reports false.
func TestSemaphoreReleaseFreesAtOnce(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(2))
		l, r := semAcquire(t, s, 2, time.Minute)
		require.True(t, r.Allowed)
		assert.Zero(t, r.Remaining)
		_, r = semAcquire(t, s, 1, time.Minute)
		require.False(t, r.Allowed)

		assert.True(t, release(t, s, l))
		assert.EqualValues(t, 2, semAvailable(t, s))
		assert.False(t, release(t, s, l), "released before")
		assert.EqualValues(t, 2, semAvailable(t, s), "given back once")

		short, r := semAcquire(t, s, 2, 50*time.Millisecond)
		require.True(t, r.Allowed)
		time.Sleep(100 * time.Millisecond)
		assert.False(t, release(t, s, short), "its lease ended")
		assert.EqualValues(t, 2, semAvailable(t, s))
		assert.EqualValues(t, 2, counter(t, e, s), "the counter never exceeds the limit")

		ok, err := s.Release(bg, core.Lease{})
		require.NoError(t, err)
		assert.False(t, ok)
	})
}

// Every release that frees permits is published on the semaphore's
// channel, where Redisson's waiters listen: with SPUBLISH on a Cluster
// (Redisson's default there), PUBLISH elsewhere; the payload is the
// permits available, as Redisson's listeners read it.
func TestSemaphoreReleasePublishes(t *testing.T) {
	runReal(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(2))
		a, _ := semAcquire(t, s, 1, time.Minute)
		b, _ := semAcquire(t, s, 1, time.Minute)
		// Subscribed once the semaphore exists: the call that creates it
		// publishes too, for Redisson's waiters on a semaphore not yet set.
		msgs := subscribe(t, e, core.SemaphoreChannel(s))
		require.True(t, release(t, s, a))
		assert.Equal(t, "1", receive(t, msgs))
		require.True(t, release(t, s, b))
		assert.Equal(t, "2", receive(t, msgs))
		assert.False(t, release(t, s, b))
		select {
		case m := <-msgs:
			t.Fatalf("a release that freed nothing published %q", m)
		case <-time.After(100 * time.Millisecond):
		}
	})
}

// subscribe listens on channel as a Redisson waiter does: SSUBSCRIBE on a
// Cluster, SUBSCRIBE elsewhere. It returns the payloads received.
func subscribe(t testing.TB, e *env, channel string) <-chan string {
	t.Helper()
	var ps *redis.PubSub
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		ps = cc.SSubscribe(bg, channel)
	} else {
		ps = e.rdb.Subscribe(bg, channel)
	}
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(bg) // the subscription's confirmation
	require.NoError(t, err)
	out := make(chan string, 16)
	go func() {
		for m := range ps.Channel() {
			out <- m.Payload
		}
	}()
	return out
}

// receive returns the next payload, failing after 2 s.
func receive(t testing.TB, msgs <-chan string) string {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(2 * time.Second):
		t.Fatal("no message on the channel")
		return ""
	}
}

// Renew sets the lease's end to now + lease by Redis's clock, and the
// permits stay held past the first lease's end.
func TestSemaphoreRenewExtends(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(1))
		l, _ := semAcquire(t, s, 1, 500*time.Millisecond)
		time.Sleep(300 * time.Millisecond)
		before := redisMs(t, e)
		assert.True(t, renew(t, s, l, 2*time.Second))
		after := redisMs(t, e)
		ends := leaseEnds(t, e, s)
		require.Len(t, ends, 1)
		assert.GreaterOrEqual(t, ends[0], before+2000)
		assert.LessOrEqual(t, ends[0], after+2000)

		time.Sleep(500 * time.Millisecond) // past the first lease's end
		_, r := semAcquire(t, s, 1, time.Second)
		assert.False(t, r.Allowed, "the renewed lease holds the permit")
		if e.virtual() {
			assert.Equal(t, 1500*time.Millisecond, r.RetryAfter)
			time.Sleep(1500 * time.Millisecond)
			_, r = semAcquire(t, s, 1, time.Second)
			assert.True(t, r.Allowed, "the renewed lease ended")
		}
	})
}

// A lease of L ms acquired at Redis time T is free from T+L, by Redis's
// clock: the next call takes it back.
func TestSemaphoreLeaseEndsByRedisClock(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(1))
		first, _ := semAcquire(t, s, 1, 100*time.Millisecond)
		ends := leaseEnds(t, e, s)
		require.Len(t, ends, 1)
		end := ends[0]
		if e.virtual() {
			time.Sleep(99 * time.Millisecond)
			_, r := semAcquire(t, s, 1, time.Second)
			assert.False(t, r.Allowed, "1 ms before its end")
			assert.Equal(t, time.Millisecond, r.RetryAfter)
			time.Sleep(time.Millisecond)
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			before := redisMs(t, e)
			l, r := semAcquire(t, s, 1, time.Minute)
			after := redisMs(t, e)
			if after < end {
				require.False(t, r.Allowed, "granted at Redis time <= %d, before the lease's end %d", after, end)
			}
			if before >= end {
				require.True(t, r.Allowed, "refused at Redis time >= %d, after the lease's end %d", before, end)
			}
			if r.Allowed {
				assert.False(t, release(t, s, first), "the first lease ended")
				assert.True(t, release(t, s, l))
				break
			}
			require.True(t, time.Now().Before(deadline))
			time.Sleep(5 * time.Millisecond)
		}
		assert.EqualValues(t, 1, semAvailable(t, s))
	})
}

// An acquire, a renewal or a release sent twice (go-redis resends a script
// whose reply was lost) does what one would.
func TestSemaphoreCallsSentTwice(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(3))
		l, r := semAcquire(t, s, 2, time.Minute)
		require.True(t, r.Allowed)
		again, r, err := core.AcquireLease(bg, s, l, time.Minute)
		require.NoError(t, err)
		assert.True(t, r.Allowed, "the resend finds its permits held")
		assert.Equal(t, l, again)
		assert.EqualValues(t, 1, r.Remaining)
		assert.EqualValues(t, 1, semAvailable(t, s), "taken once")

		assert.True(t, renew(t, s, l, time.Minute))
		assert.True(t, renew(t, s, l, time.Minute))
		assert.EqualValues(t, 1, semAvailable(t, s), "renewed, nothing taken")

		assert.True(t, release(t, s, l))
		assert.False(t, release(t, s, l))
		assert.EqualValues(t, 3, semAvailable(t, s), "given back once")
		assert.EqualValues(t, 3, counter(t, e, s))
	})
}

// Renew holds again the permits that Redis lost (restarted empty: here
// its keys deleted; see TestSemaphoreLeaseOutlivesRedis for a real
// restart), even past the limit: the counter goes below zero, a debt that
// acquires wait out.
func TestSemaphoreRenewHoldsAgainWhatRedisLost(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(2))
		l, _ := semAcquire(t, s, 1, time.Minute)
		wipe(t, e, s)
		assert.EqualValues(t, 2, semAvailable(t, s), "Redis lost the lease")
		assert.False(t, renew(t, s, l, time.Minute), "held again")
		assert.EqualValues(t, 1, semAvailable(t, s))
		assert.True(t, renew(t, s, l, time.Minute))
		assert.EqualValues(t, 1, semAvailable(t, s))

		// Past the limit: two leases held of two, Redis loses both, others
		// take both permits, then the two renewals come.
		a, _ := semAcquire(t, s, 1, time.Minute)
		wipe(t, e, s)
		b, r := semAcquire(t, s, 2, time.Minute)
		require.True(t, r.Allowed)
		assert.False(t, renew(t, s, l, time.Minute))
		assert.False(t, renew(t, s, a, time.Minute))
		assert.EqualValues(t, -2, counter(t, e, s), "a debt of two permits")
		assert.EqualValues(t, 0, semAvailable(t, s))
		_, r = semAcquire(t, s, 1, time.Minute)
		assert.False(t, r.Allowed)
		assert.Zero(t, r.Remaining)
		assert.Positive(t, r.RetryAfter)
		require.True(t, release(t, s, b))
		assert.EqualValues(t, 0, semAvailable(t, s), "the debt paid")
		require.True(t, release(t, s, a))
		assert.EqualValues(t, 1, semAvailable(t, s))
	})
}

// A lease that a failed TryAcquire returned, which a fallback granted
// without Redis, is registered by Renew.
func TestSemaphoreRenewRegistersALocalLease(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t, core.WithPermits(3))
		ctx, cancel := context.WithCancel(bg)
		cancel()
		l, r, err := s.TryAcquire(ctx, 2, time.Minute)
		require.ErrorIs(t, err, context.Canceled)
		assert.False(t, r.Allowed)
		require.False(t, l == (core.Lease{}), "the lease it asked for")
		assert.EqualValues(t, 3, semAvailable(t, s), "not sent")

		assert.False(t, renew(t, s, l, time.Minute), "registered")
		assert.EqualValues(t, 1, semAvailable(t, s))
		assert.True(t, release(t, s, l))
		assert.EqualValues(t, 3, semAvailable(t, s))
	})
}

// A lease lives through a restart of Redis (empty, its keys lost) and an
// outage, in which TryAcquire returns the lease it asked for: Renew holds
// both again once Redis answers.
func TestSemaphoreLeaseOutlivesRedis(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := core.New(rdb)
	require.NoError(t, err)
	require.NoError(t, c.Check(bg), "Check loads the semaphore's scripts too")
	s := c.Semaphore(uniqueName(t), core.WithPermits(3), core.WithCallTimeout(200*time.Millisecond))

	held, _ := semAcquire(t, s, 1, time.Minute)
	require.NoError(t, srv.Restart())
	assert.EqualValues(t, 3, semAvailable(t, s), "restarted empty")
	assert.False(t, renew(t, s, held, time.Minute))
	assert.EqualValues(t, 2, semAvailable(t, s))

	require.NoError(t, srv.Stop())
	local, r, err := s.TryAcquire(bg, 1, time.Minute)
	require.ErrorIs(t, err, core.ErrUnavailable)
	assert.False(t, r.Allowed)
	require.False(t, local == (core.Lease{}))
	require.NoError(t, srv.Restart())
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok, err := s.Renew(bg, local, time.Minute)
		if err == nil {
			assert.False(t, ok, "registered")
			break
		}
		require.ErrorIs(t, err, core.ErrUnavailable)
		require.True(t, time.Now().Before(deadline), "Redis answers again within the probe's second")
	}
	assert.False(t, renew(t, s, held, time.Minute), "restarted empty again")
	assert.EqualValues(t, 1, semAvailable(t, s))
}

// WithPermits changed in code brings the total to the new limit and keeps
// the leases held: lowered below them, it is a debt.
func TestSemaphoreWithPermitsChangedKeepsLeases(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t)
		s := c.Semaphore(e.name, core.WithPermits(3))
		a, _ := semAcquire(t, s, 1, time.Minute)
		b, _ := semAcquire(t, s, 1, time.Minute)

		more := c.Semaphore(e.name, core.WithPermits(5))
		assert.EqualValues(t, 3, semAvailable(t, more))
		_, r := semAcquire(t, more, 3, time.Minute)
		require.True(t, r.Allowed)
		assert.Zero(t, r.Remaining)
		assert.Len(t, leaseEnds(t, e, s), 5)

		fewer := c.Semaphore(e.name, core.WithPermits(4))
		_, r = semAcquire(t, fewer, 1, time.Minute)
		assert.False(t, r.Allowed)
		assert.EqualValues(t, -1, counter(t, e, s), "5 held of 4")
		require.True(t, release(t, fewer, a))
		assert.EqualValues(t, 0, semAvailable(t, fewer))
		require.True(t, release(t, fewer, b))
		assert.EqualValues(t, 1, semAvailable(t, fewer))
		assert.EqualValues(t, 0, semAvailable(t, s), "the old limit, in its own calls: 3 held of 3")
	})
}

// Without WithPermits, the limit is the total stored in Redis: a semaphore
// Redis does not have is ErrNotInitialized, and a request above the total
// can never be granted. A counter stored without a TTL (as Redisson's
// trySetPermits writes it) is the only record of the limit, and keeps none.
func TestSemaphoreStoredLimit(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.semaphore(t)
		l, _, err := s.TryAcquire(bg, 1, time.Second)
		require.ErrorIs(t, err, core.ErrNotInitialized)
		assert.True(t, l == (core.Lease{}), "Redis's answer")
		_, err = s.Available(bg)
		require.ErrorIs(t, err, core.ErrNotInitialized)
		_, err = s.Renew(bg, core.NewLease(1), time.Second)
		require.ErrorIs(t, err, core.ErrNotInitialized)
		assert.Zero(t, e.exists(t, core.SemaphoreKeys(s)...), "nothing written")

		coded := e.semaphore(t, core.WithPermits(2))
		a, _ := semAcquire(t, coded, 1, time.Minute)
		assert.EqualValues(t, 1, semAvailable(t, s))
		b, r := semAcquire(t, s, 1, time.Minute)
		require.True(t, r.Allowed)
		_, _, err = s.TryAcquire(bg, 3, time.Minute)
		require.ErrorIs(t, err, core.ErrPermitsExceedRate)
		release(t, s, a)
		release(t, s, b)

		require.NoError(t, e.rdb.Set(bg, core.SemaphoreKeys(s)[0], 4, 0).Err())
		l, _ = semAcquire(t, s, 1, time.Minute)
		require.False(t, l == (core.Lease{}))
		for _, k := range core.SemaphoreKeys(s) {
			ttl, err := e.rdb.PTTL(bg, k).Result()
			require.NoError(t, err)
			assert.Equal(t, time.Duration(-1), ttl, "%s keeps no TTL", k)
		}
		assert.EqualValues(t, 3, semAvailable(t, s))
	})
}

// A random sequence of every call, on two Clients, with limits changed in
// code, leases ending and Redis losing keys, checked after every step:
// every key exists with a TTL, and outlives the leases it holds.
func TestSemaphoreKeysAlwaysHaveATTL(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, seed))
		t.Logf("seed %d", seed)
		steps := 150
		if e.virtual() {
			steps = 1000
		}
		const unit = 20 * time.Millisecond
		clients := []*core.Client{e.client(t), e.client(t)}
		limits := []int64{3, 3}
		sems := []*core.Semaphore{
			clients[0].Semaphore(e.name, core.WithPermits(3)),
			clients[1].Semaphore(e.name, core.WithPermits(3)),
		}
		var leases []core.Lease
		pick := func() core.Lease {
			if len(leases) == 0 {
				return core.NewLease(1)
			}
			return leases[rng.IntN(len(leases))]
		}
		for i := range steps {
			j := rng.IntN(2)
			s := sems[j]
			lease := unit * time.Duration(1+rng.IntN(4))
			var step string
			switch rng.IntN(10) {
			case 0, 1, 2:
				step = "acquire"
				l, r, err := s.TryAcquire(bg, 1+rng.Int64N(2), lease)
				if errors.Is(err, core.ErrPermitsExceedRate) {
					break
				}
				require.NoError(t, err)
				if r.Allowed {
					leases = append(leases, l)
				}
			case 3:
				step = "release"
				_, err := s.Release(bg, pick())
				require.NoError(t, err)
			case 4, 5:
				step = "renew"
				_, err := s.Renew(bg, pick(), lease)
				require.NoError(t, err)
			case 6:
				step = "acquire sent again"
				_, _, err := core.AcquireLease(bg, s, pick(), lease)
				if !errors.Is(err, core.ErrPermitsExceedRate) { // a lease of more than the limit
					require.NoError(t, err)
				}
			case 7:
				step = "wait"
				time.Sleep(time.Duration(rng.IntN(5)) * unit)
			case 8:
				step = "limit changed in code"
				limits[j] = 1 + rng.Int64N(4)
				sems[j] = clients[j].Semaphore(e.name, core.WithPermits(limits[j]))
			case 9:
				step = "available"
				_, err := s.Available(bg)
				require.NoError(t, err)
				if rng.IntN(10) == 0 {
					step = "redis lost the keys"
					wipe(t, e, s)
				}
			}
			ends := leaseEnds(t, e, s)
			for _, k := range core.SemaphoreKeys(s) {
				ttl, err := e.rdb.PTTL(bg, k).Result()
				require.NoError(t, err)
				require.NotEqual(t, time.Duration(-1), ttl, "step %d (%s): %s has no TTL", i, step, k)
				if ttl > 0 && len(ends) > 0 {
					left := time.Duration(ends[len(ends)-1]-redisMs(t, e)) * time.Millisecond
					require.GreaterOrEqual(t, ttl, left, "step %d (%s): %s ends before a lease it holds", i, step, k)
				}
			}
		}
		if e.virtual() {
			time.Sleep(5*unit + 10*time.Second) // past every lease and the keys' margin
			assert.Zero(t, e.exists(t, core.SemaphoreKeys(sems[0])...), "an idle semaphore's keys expire")
			assert.EqualValues(t, limits[0], semAvailable(t, sems[0]), "and it is full again")
		}
	})
}

// A key of the semaphore that holds another type of value fails that
// semaphore's calls with ErrInvalidConfig, writing nothing; other
// semaphores decided meanwhile, in the same round trips, are not affected.
// A garbled counter is rebuilt from a limit in code.
func TestSemaphoreKeyOfAnotherTypeFailsAlone(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		c := e.client(t)
		for i, poison := range []func(keys []string) error{
			func(keys []string) error { return e.rdb.HSet(bg, keys[0], "f", "v").Err() },
			func(keys []string) error { return e.rdb.Set(bg, keys[1], "x", 0).Err() },
		} {
			bad := c.Semaphore(e.name+".bad"+strconv.Itoa(i), core.WithPermits(2))
			good := c.Semaphore(e.name+".good"+strconv.Itoa(i), core.WithPermits(4))
			keys := core.SemaphoreKeys(bad)
			require.NoError(t, poison(keys))
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					l, _, err := bad.TryAcquire(bg, 1, time.Minute)
					assert.ErrorIs(t, err, core.ErrInvalidConfig)
					assert.True(t, l == (core.Lease{}))
					_, err = bad.Renew(bg, core.NewLease(1), time.Minute)
					assert.ErrorIs(t, err, core.ErrInvalidConfig)
					_, err = bad.Release(bg, core.NewLease(1))
					assert.ErrorIs(t, err, core.ErrInvalidConfig)
					_, err = bad.Available(bg)
					assert.ErrorIs(t, err, core.ErrInvalidConfig)
				})
				wg.Go(func() {
					l, r, err := good.TryAcquire(bg, 1, time.Minute)
					if assert.NoError(t, err) && assert.True(t, r.Allowed) {
						_, err = good.Release(bg, l)
						assert.NoError(t, err)
					}
				})
			}
			wg.Wait()
			assert.EqualValues(t, 1, e.exists(t, keys...), "nothing written")
			typ, err := e.rdb.Type(bg, keys[0]).Result()
			require.NoError(t, err)
			assert.Contains(t, []string{"hash", "none"}, typ)
		}

		garbled := c.Semaphore(e.name+".garbled", core.WithPermits(2))
		require.NoError(t, e.rdb.Set(bg, core.SemaphoreKeys(garbled)[0], "1.5", 0).Err())
		_, err := c.Semaphore(e.name + ".garbled").Available(bg)
		require.ErrorIs(t, err, core.ErrInvalidConfig, "no limit to rebuild it from")
		assert.EqualValues(t, 2, semAvailable(t, garbled))
		_, r := semAcquire(t, garbled, 1, time.Minute)
		assert.True(t, r.Allowed)
		assert.EqualValues(t, 1, counter(t, e, garbled), "rebuilt")
	})
}

// Bad arguments fail before any I/O (the Client's Redis is unreachable).
func TestSemaphoreValidation(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := core.New(rdb)
	require.NoError(t, err)
	ok := c.Semaphore("ok", core.WithPermits(2))
	for name, tc := range map[string]struct {
		s       *core.Semaphore
		permits int64
		lease   time.Duration
		want    error
	}{
		"zero lease":         {ok, 1, 0, core.ErrInvalidDuration},
		"negative lease":     {ok, 1, -time.Second, core.ErrInvalidDuration},
		"fractional lease":   {ok, 1, 1500 * time.Microsecond, core.ErrInvalidDuration},
		"zero permits":       {ok, 0, time.Second, core.ErrInvalidPermits},
		"too many permits":   {c.Semaphore("x"), 10_001, time.Second, core.ErrInvalidPermits},
		"above the limit":    {ok, 3, time.Second, core.ErrPermitsExceedRate},
		"empty name":         {c.Semaphore(""), 1, time.Second, core.ErrInvalidName},
		"brace without tag":  {c.Semaphore("a}b"), 1, time.Second, core.ErrInvalidName},
		"unclosed tag":       {c.Semaphore("a{b"), 1, time.Second, core.ErrInvalidName},
		"empty tag":          {c.Semaphore("a{}b"), 1, time.Second, core.ErrInvalidName},
		"zero limit":         {c.Semaphore("x", core.WithPermits(0)), 1, time.Second, core.ErrInvalidPermits},
		"nil option":         {c.Semaphore("x", nil), 1, time.Second, core.ErrInvalidOption},
		"negative timeout":   {c.Semaphore("x", core.WithCallTimeout(-time.Second)), 1, time.Second, core.ErrInvalidOption},
		"limit beyond MaxPe": {c.Semaphore("x", core.WithPermits(core.MaxPermits+1)), 1, time.Second, core.ErrInvalidPermits},
	} {
		l, _, err := tc.s.TryAcquire(bg, tc.permits, tc.lease)
		assert.ErrorIs(t, err, tc.want, name)
		assert.NotErrorIs(t, err, core.ErrUnavailable, name)
		assert.True(t, l == (core.Lease{}), name)
		if tc.lease > 0 && tc.lease%time.Millisecond == 0 && tc.permits == 1 {
			_, err = tc.s.Renew(bg, core.NewLease(1), tc.lease)
			assert.ErrorIs(t, err, tc.want, name)
			_, err = tc.s.Release(bg, core.NewLease(1))
			assert.ErrorIs(t, err, tc.want, name)
			_, err = tc.s.Available(bg)
			assert.ErrorIs(t, err, tc.want, name)
		}
	}
	_, err = ok.Renew(bg, core.NewLease(1), 0)
	assert.ErrorIs(t, err, core.ErrInvalidDuration)
	renewed, err := ok.Renew(bg, core.Lease{}, time.Second)
	assert.NoError(t, err, "a zero lease: nothing to do, no I/O")
	assert.False(t, renewed)
	assert.Equal(t, "pre:ok", core.SemaphoreName(mustClient(t, rdb, core.WithKeyPrefix("pre:")).Semaphore("ok")))
}

func mustClient(t testing.TB, rdb redis.UniversalClient, opts ...core.Option) *core.Client {
	t.Helper()
	c, err := core.New(rdb, opts...)
	require.NoError(t, err)
	return c
}

// A name with a {hash tag} keeps Redisson's other key rule, and a Cluster
// takes its calls.
func TestSemaphoreHashTagName(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		s := e.client(t).Semaphore("sem{"+e.name+"}x", core.WithPermits(1))
		assert.Equal(t, []string{"sem{" + e.name + "}x", "sem{" + e.name + "}x:timeout"}, core.SemaphoreKeys(s))
		assert.Equal(t, "redisson_sc:sem{"+e.name+"}x", core.SemaphoreChannel(s))
		l, r := semAcquire(t, s, 1, time.Minute)
		require.True(t, r.Allowed)
		assert.True(t, release(t, s, l))
		plain := e.client(t).Semaphore(e.name)
		assert.Equal(t, []string{e.name, "{" + e.name + "}:timeout"}, core.SemaphoreKeys(plain))
		assert.Equal(t, "redisson_sc:{"+e.name+"}", core.SemaphoreChannel(plain))
	})
}

// WithCallTimeout bounds a semaphore's round trips as a limiter's: a
// Redis that answers late fails the call at the timeout, and TryAcquire
// returns the lease it asked for.
func TestSemaphoreCallTimeout(t *testing.T) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	rdb.AddHook(redistest.Slow{Delay: 2 * time.Second})
	c, err := core.New(rdb)
	require.NoError(t, err)
	s := c.Semaphore(uniqueName(t), core.WithPermits(1), core.WithCallTimeout(100*time.Millisecond))
	start := time.Now()
	l, _, err := s.TryAcquire(bg, 1, time.Minute)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, l == (core.Lease{}), "the lease it asked for")
	assert.Less(t, time.Since(start), time.Second)
}

// A semaphore's keys take Redis memory per permit held: its counter, and
// a member of its leases per permit. Measured with MEMORY USAGE for the
// name of TestQuotaMemoryPerKey's quota, so that the kinds of limit compare.
func TestSemaphoreMemoryPerKey(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		s := e.client(t).Semaphore("api:user:2001:db8:1234:5678::/64", core.WithPermits(10))
		t.Cleanup(func() {
			for _, k := range core.SemaphoreKeys(s) {
				_ = e.rdb.Del(bg, k).Err()
			}
		})
		usage := func() int64 {
			var n int64
			for _, k := range core.SemaphoreKeys(s) {
				m, err := e.rdb.MemoryUsage(bg, k).Result()
				require.NoError(t, err)
				n += m
			}
			return n
		}
		_, r, err := s.TryAcquire(bg, 1, time.Minute)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		one := usage()
		_, r, err = s.TryAcquire(bg, 9, time.Minute)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		ten := usage()
		t.Logf("keys %v: %d bytes (MEMORY USAGE) with 1 permit held, %d with 10", core.SemaphoreKeys(s), one, ten)
		assert.LessOrEqual(t, one, int64(300))
		assert.LessOrEqual(t, ten-one, int64(9*40), "at most 40 bytes per permit held")
	})
}
