package core_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
)

// keysWithoutTTL returns the keys of the limiters that exist with no TTL.
func keysWithoutTTL(t *testing.T, e *env, ls ...*core.Limiter) []string {
	t.Helper()
	var bad []string
	for _, l := range ls {
		for _, k := range core.Keys(l) {
			ttl, err := e.rdb.PTTL(bg, k).Result()
			require.NoError(t, err)
			if ttl == -1 { // exists, no TTL (-2: no such key)
				bad = append(bad, k)
			}
		}
	}
	return bad
}

// A log emptied while the counter still has TTL to spare (its grants left
// the window, Release, Refund or a Settle to 0 took the last one, a rate
// change recounted it away) is created again by the next grant, which
// gives it a TTL.
func TestKeysKeepATTLWhenTheLogEmpties(t *testing.T) {
	for _, typ := range []core.RateType{core.Overall, core.PerClient} {
		t.Run(typ.String(), func(t *testing.T) {
			run(t, func(t *testing.T, e *env) {
				r := rate(typ, 10, 300*time.Millisecond)
				r.KeepAlive = 3 * time.Second
				steps := map[string]func(l *core.Limiter){
					"grants left the window": func(*core.Limiter) { time.Sleep(450 * time.Millisecond) },
					"release took the last grant": func(l *core.Limiter) {
						require.NoError(t, l.Release(bg, 1))
					},
					"a rate change recounted the log away": func(l *core.Limiter) {
						time.Sleep(150 * time.Millisecond)
						ok, err := l.UpdateRate(bg, rate(typ, 10, 100*time.Millisecond))
						require.NoError(t, err)
						require.True(t, ok)
					},
				}
				var last core.Grant
				steps["refund took the last grant"] = func(l *core.Limiter) {
					ok, err := l.Refund(bg, last)
					require.NoError(t, err)
					require.True(t, ok)
				}
				steps["a settle to 0 took the last grant"] = func(l *core.Limiter) {
					ok, err := l.Settle(bg, last, 0)
					require.NoError(t, err)
					require.True(t, ok)
				}
				for name, emptyLog := range steps {
					l := e.client(t).Limiter(uniqueName(t), core.WithRate(r))
					res, err := l.TryAcquire(bg, 1)
					require.NoError(t, err)
					require.True(t, res.Allowed, name)
					last = res.Grant
					emptyLog(l)
					require.True(t, tryAcquire(t, l, 1), name)
					assert.Empty(t, keysWithoutTTL(t, e, l), name)
					ttl, err := e.rdb.PTTL(bg, core.Keys(l)[3+int(typ)]).Result()
					require.NoError(t, err)
					assert.GreaterOrEqual(t, ttl, r.Interval, "%s: the log lives at least one interval past the grant", name)
				}
			})
		})
	}
}

// A random sequence of every operation on limiters with a rate in code
// (two clients, so that PerClient state of both exists), checked after
// every step: no key exists without a TTL.
func TestKeysAlwaysHaveATTL(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, seed))
		steps := 150
		if e.virtual() {
			steps = 1000
		}
		const unit = 20 * time.Millisecond
		randomRate := func() core.Rate {
			r := rate(core.RateType(rng.IntN(2)), 1+rng.Int64N(5), unit*time.Duration(1+rng.IntN(3)))
			if rng.IntN(2) == 0 {
				r.KeepAlive = r.Interval * time.Duration(1+rng.IntN(3))
			}
			return r
		}
		name := e.name
		clients := []*core.Client{e.client(t), e.client(t)}
		limiters := []*core.Limiter{
			clients[0].Limiter(name, core.WithRate(randomRate())),
			clients[1].Limiter(name, core.WithRate(randomRate())),
		}
		for i := range steps {
			j := rng.IntN(2)
			l := limiters[j]
			var step string
			switch op := rng.IntN(12); op {
			case 0, 1, 2, 3:
				step = "acquire"
				_, _ = l.TryAcquire(bg, 1+rng.Int64N(2)) // may exceed the rate: an error, no write
			case 4:
				step = "release"
				require.NoError(t, l.Release(bg, 1)) // at most the rate: the smallest is 1
			case 5:
				step = "wait past the window"
				time.Sleep(3*unit + time.Duration(rng.IntN(int(unit))))
			case 6:
				step = "rate changed in code"
				limiters[j] = clients[j].Limiter(name, core.WithRate(randomRate()))
			case 7:
				step = "UpdateRate or SetRate"
				if rng.IntN(2) == 0 {
					_, err := l.UpdateRate(bg, randomRate())
					require.NoError(t, err)
				} else {
					require.NoError(t, l.SetRate(bg, randomRate()))
				}
			case 8:
				step = "AvailablePermits"
				_, err := l.AvailablePermits(bg)
				require.NoError(t, err)
			case 9:
				step = "Expire or ClearExpire"
				var err error
				if rng.IntN(2) == 0 {
					_, err = l.Expire(bg, time.Duration(1+rng.IntN(100))*time.Millisecond)
				} else {
					_, err = l.ClearExpire(bg)
				}
				require.NoError(t, err)
			case 10:
				step = "Delete"
				_, err := l.Delete(bg)
				require.NoError(t, err)
			case 11:
				step = "short wait"
				time.Sleep(time.Duration(rng.IntN(int(unit))))
			}
			if bad := keysWithoutTTL(t, e, limiters...); len(bad) > 0 {
				t.Fatalf("seed %d, step %d (%s): keys without a TTL: %q", seed, i, step, bad)
			}
		}
	})
}

// A denial that changes nothing leaves the keys as they were. One on a
// stored or per-client rate writes nothing: no replication or AOF traffic.
// One on an overall rate given in code, whose grant is a DECRBY without a
// read before it, undoes it with an INCRBY: two writes that cancel (the
// denial cache, on by default, keeps a denied client's next requests from
// Redis). Redis counts every write in rdb_changes_since_last_save.
func TestDenialsWriteNothing(t *testing.T) {
	runRedis(t, func(t *testing.T, e *env) {
		c := e.client(t, core.WithDenialCache(0))
		coded := c.Limiter(uniqueName(t), core.WithRate(rate(core.Overall, 3, time.Minute)))
		perClient := c.Limiter(uniqueName(t))
		require.NoError(t, perClient.SetRate(bg, rate(core.PerClient, 3, time.Minute)))
		for _, l := range []*core.Limiter{coded, perClient} {
			require.True(t, tryAcquire(t, l, 2))
			require.True(t, tryAcquire(t, l, 1))
		}
		state := func() []string {
			var out []string
			for _, k := range core.Keys(coded)[:2] {
				v, err := e.rdb.Dump(bg, k).Result()
				require.NoError(t, err)
				out = append(out, v)
			}
			v, err := e.rdb.Dump(bg, core.Keys(coded)[3]).Result()
			require.NoError(t, err)
			return append(out, v)
		}
		before := state()
		// The server is shared with other tests: compare the write counter
		// around denials until a quiet spell shows none but ours wrote.
		var wrote [2]int64
		for range 20 {
			for i, l := range []*core.Limiter{perClient, coded} {
				start := changes(t, e)
				for range 50 {
					r, err := l.TryAcquire(bg, 1)
					require.NoError(t, err)
					require.False(t, r.Allowed)
				}
				wrote[i] = changes(t, e) - start
			}
			if wrote[0] == 0 && wrote[1] == 2*50 {
				break
			}
		}
		assert.Zero(t, wrote[0], "writes during 50 denials on a stored per-client rate")
		assert.EqualValues(t, 2*50, wrote[1], "writes during 50 denials on a rate given in code: a DECRBY and its undoing each")
		assert.Equal(t, before, state(), "the config, counter and log as they were")
	})
}

// changes returns Redis's count of writes since the last save.
func changes(t *testing.T, e *env) int64 {
	t.Helper()
	info, err := e.rdb.InfoMap(bg, "persistence").Result()
	require.NoError(t, err)
	n, err := strconv.ParseInt(info["Persistence"]["rdb_changes_since_last_save"], 10, 64)
	require.NoError(t, err)
	return n
}

// An acquire resent with the same log member (after a lost reply) takes
// nothing while its first grant is in the window, and takes again once the
// grant has left it: idempotency lasts one interval from the grant.
func TestIdempotencyLastsOneWindow(t *testing.T) {
	runMini(t, func(t *testing.T, e *env) {
		const interval = 100 * time.Millisecond
		l := e.limiter(t, core.WithRate(rate(core.Overall, 2, interval)))
		m := core.Member(1)
		r, err := core.AcquireMember(bg, l, 1, m)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		granted := core.DecisionTime(r)

		time.Sleep(interval - time.Millisecond)
		r, err = core.AcquireMember(bg, l, 1, m)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		assert.Equal(t, granted.Add(interval-time.Millisecond), core.DecisionTime(r))
		assert.EqualValues(t, 1, r.Remaining, "1 ms before the grant leaves the window: nothing taken")

		time.Sleep(time.Millisecond)
		r, err = core.AcquireMember(bg, l, 1, m)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		assert.EqualValues(t, 1, r.Remaining, "the grant left the window: the resend took a permit again")
		assert.EqualValues(t, 1, available(t, l))
	})
}

// The retry time is exact on every backend: a denial's RetryAfter is the
// time from the denial until the oldest grant leaves the window, on the
// server's clock, to the millisecond; and the permit is there then.
func TestRetryAfterIsExact(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		const interval = 400 * time.Millisecond
		l := e.client(t, core.WithDenialCache(0)).Limiter(e.name, core.WithRate(rate(core.Overall, 3, interval)))
		var grants []time.Time
		for range 3 {
			r, err := l.TryAcquire(bg, 1)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			grants = append(grants, core.DecisionTime(r))
			time.Sleep(30 * time.Millisecond)
		}
		for need := int64(1); need <= 3; need++ {
			r, err := l.TryAcquire(bg, need)
			require.NoError(t, err)
			require.False(t, r.Allowed)
			want := grants[need-1].Add(interval).Sub(core.DecisionTime(r))
			assert.Equal(t, want, r.RetryAfter, "%d permits: back when the %d oldest grants leave the window", need, need)
		}
		r, err := l.TryAcquire(bg, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		time.Sleep(r.RetryAfter)
		for {
			// The wait is measured on this process's clock and the decision on
			// the server's: retry until the server's clock is past the time too,
			// and check that no grant came before it.
			r2, err := l.TryAcquire(bg, 1)
			require.NoError(t, err)
			if r2.Allowed {
				assert.False(t, core.DecisionTime(r2).Before(grants[0].Add(interval)), "granted before the permit was back")
				break
			}
			assert.LessOrEqual(t, r2.RetryAfter, 2*time.Millisecond, "after waiting RetryAfter, the permit is at most a clock tick away")
			time.Sleep(r2.RetryAfter)
		}
	})
}

// Acquires decided together in one script call (as coalescing sends the
// acquires that queue up together: those on one limiter in a group, several
// limiters in one call) get exactly the results of the same calls made one by
// one: the same grants and denials and remaining permits, one log member per
// grant, a resend among them takes nothing, and each denial's retry and reset
// times are those of the same grant leaving the window. (The calls one by one
// run later, and their grants have later times: a time is compared as "the
// grant whose expiry it is".)
func TestAcquiresTogetherMatchOneByOne(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, seed))
		c := e.client(t, core.WithDenialCache(0))
		// A hash tag keeps a round's limiters in one Cluster slot, as the
		// Client's batcher per slot does.
		tag := "{" + uniqueName(t) + "}"
		for round := range 20 {
			type twin struct {
				r               core.Rate
				together, alone *core.Limiter
				earlier         []core.Acquire // history, for resends
				timesT, timesA  []time.Time    // grant times of each, in order
			}
			twins := make([]*twin, 1+rng.IntN(3))
			for k := range twins {
				r := rate(core.RateType(rng.IntN(2)), 2+rng.Int64N(12), time.Minute)
				if rng.IntN(4) == 0 {
					r.Permits = core.MaxPermits // never denied
				}
				tw := &twin{r: r,
					together: c.Limiter(tag+uniqueName(t), core.WithRate(r)),
					alone:    c.Limiter(tag+uniqueName(t), core.WithRate(r))}
				for range rng.IntN(int(min(r.Permits, 12))) {
					m := core.Member(1)
					rt, err := core.AcquireMember(bg, tw.together, 1, m)
					require.NoError(t, err)
					ra, err := core.AcquireMember(bg, tw.alone, 1, m)
					require.NoError(t, err)
					require.True(t, rt.Allowed && ra.Allowed)
					tw.timesT = append(tw.timesT, core.DecisionTime(rt))
					tw.timesA = append(tw.timesA, core.DecisionTime(ra))
					tw.earlier = append(tw.earlier, core.Acquire{Limiter: tw.together, Permits: 1, Member: m})
					if !e.virtual() {
						time.Sleep(2 * time.Millisecond) // distinct grant times
					}
				}
				twins[k] = tw
			}
			acqs := make([]core.Acquire, 1+rng.IntN(24))
			of := make([]*twin, len(acqs))
			resend := make([]bool, len(acqs))
			for i := range acqs {
				tw := twins[rng.IntN(len(twins))]
				p := 1 + rng.Int64N(min(3, tw.r.Permits))
				acqs[i], of[i] = core.Acquire{Limiter: tw.together, Permits: p, Member: core.Member(p)}, tw
				if len(tw.earlier) > 0 && rng.IntN(5) == 0 {
					acqs[i], resend[i] = tw.earlier[rng.IntN(len(tw.earlier))], true
				}
			}
			require.Equal(t, 1, core.ScriptCalls(acqs), "one script call")
			got, errs, err := core.AcquireTogether(bg, acqs)
			require.NoError(t, err)
			want := make([]core.Result, len(acqs))
			for i, a := range acqs {
				tw := of[i]
				msg := []any{"seed %d, round %d, acquire %d of %d (%d permits, rate %v)", seed, round, i, len(acqs), a.Permits, tw.r}
				require.NoError(t, errs[i], msg...)
				want[i], err = core.AcquireMember(bg, tw.alone, a.Permits, a.Member)
				require.NoError(t, err, msg...)
				assert.Equal(t, want[i].Allowed, got[i].Allowed, msg...)
				assert.Equal(t, want[i].Remaining, got[i].Remaining, msg...)
				if got[i].Allowed && !resend[i] {
					tw.timesT = append(tw.timesT, core.DecisionTime(got[i]))
					tw.timesA = append(tw.timesA, core.DecisionTime(want[i]))
				}
			}
			for i := range acqs {
				tw := of[i]
				// sameGrant: the same grant leaves the window at both times.
				sameGrant := func(atT, atA time.Time) bool {
					for k := range tw.timesT {
						if tw.timesT[k].Add(tw.r.Interval).Equal(atT) && tw.timesA[k].Add(tw.r.Interval).Equal(atA) {
							return true
						}
					}
					return false
				}
				if got[i].Allowed {
					assert.Zero(t, got[i].RetryAfter)
					continue
				}
				msg := []any{"seed %d, round %d, acquire %d", seed, round, i}
				dt, da := core.DecisionTime(got[i]), core.DecisionTime(want[i])
				assert.True(t, sameGrant(dt.Add(got[i].RetryAfter), da.Add(want[i].RetryAfter)), msg...)
				if got[i].ResetAfter != got[i].RetryAfter || want[i].ResetAfter != want[i].RetryAfter {
					assert.True(t, sameGrant(dt.Add(got[i].ResetAfter), da.Add(want[i].ResetAfter)), msg...)
				}
			}
			for _, tw := range twins {
				log := 3 + int(tw.r.Type)
				n1, err := e.rdb.ZCard(bg, core.Keys(tw.together)[log]).Result()
				require.NoError(t, err)
				n2, err := e.rdb.ZCard(bg, core.Keys(tw.alone)[log]).Result()
				require.NoError(t, err)
				assert.Equal(t, n2, n1, "one log member per grant")
				assert.Equal(t, available(t, tw.alone), available(t, tw.together))
			}
		}
	})
}
