package core_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

// BenchmarkSemaphoreCost measures what a semaphore costs, on a
// redis-server of its own, against one rate-limiter decision: per
// operation, the round trips (go-redis commands and pipelines sent), the
// script calls, the Redis commands those scripts ran, and the script time
// by Redis's own clock (INFO commandstats: EVALSHA and EVAL, whose time
// includes the commands they run). An operation is a take and a give back
// (TryAcquire then Release of one permit), a renewal, or one decision of
// a limiter with its rate in code.
//
//	go test -run '^$' -bench BenchmarkSemaphoreCost -benchtime 20000x ./core/
func BenchmarkSemaphoreCost(b *testing.B) {
	redistest.Need(b)
	srv, err := redistest.Start()
	require.NoError(b, err)
	b.Cleanup(func() { _ = srv.Stop() })
	rdb := srv.Client(b)
	sent := &counting{}
	rdb.AddHook(sent)
	c, err := core.New(rdb)
	require.NoError(b, err)

	measure := func(b *testing.B, op func()) {
		op() // the scripts loaded, the keys created
		require.NoError(b, rdb.ConfigResetStat(bg).Err())
		trips := sent.n.Load()
		for b.Loop() {
			op()
		}
		trips = sent.n.Load() - trips - 1 // less INFO's
		stats := commandStats(b, rdb)
		n := float64(b.N)
		script := stats["evalsha"].add(stats["eval"])
		var commands int64
		for name, s := range stats {
			if name != "evalsha" && name != "eval" && name != "info" && name != "config|resetstat" {
				commands += s.calls
			}
		}
		b.ReportMetric(float64(trips)/n, "round-trips/op")
		b.ReportMetric(float64(script.calls)/n, "scripts/op")
		b.ReportMetric(float64(commands)/n, "redis-commands/op")
		b.ReportMetric(float64(script.usec)/n, "script-µs/op")
	}

	b.Run("semaphore take and give back", func(b *testing.B) {
		s := c.Semaphore(uniqueName(b), core.WithPermits(100))
		measure(b, func() {
			l, r, err := s.TryAcquire(bg, 1, time.Minute)
			if err != nil || !r.Allowed {
				b.Fatal(err, r.Allowed)
			}
			if _, err := s.Release(bg, l); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("semaphore renew", func(b *testing.B) {
		s := c.Semaphore(uniqueName(b), core.WithPermits(100))
		l, _, err := s.TryAcquire(bg, 1, time.Minute)
		require.NoError(b, err)
		measure(b, func() {
			if _, err := s.Renew(bg, l, time.Minute); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("limiter decision", func(b *testing.B) {
		l := c.Limiter(uniqueName(b), core.WithRate(core.Rate{Permits: core.MaxPermits, Interval: time.Minute}))
		measure(b, func() {
			if r, err := l.TryAcquire(bg, 1); err != nil || !r.Allowed {
				b.Fatal(err, r.Allowed)
			}
		})
	})
}

// cmdStat is one command's calls and time (µs) in INFO commandstats.
type cmdStat struct{ calls, usec int64 }

func (s cmdStat) add(o cmdStat) cmdStat { return cmdStat{s.calls + o.calls, s.usec + o.usec} }

// commandStats returns INFO commandstats, by command.
func commandStats(t testing.TB, rdb redis.UniversalClient) map[string]cmdStat {
	t.Helper()
	info, err := rdb.Info(bg, "commandstats").Result()
	require.NoError(t, err)
	stats := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		var s cmdStat
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.calls = n
			case "usec":
				s.usec = n
			}
		}
		stats[name] = s
	}
	return stats
}
