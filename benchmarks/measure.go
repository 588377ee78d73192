package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// harness runs measurements against one redis-server.
type harness struct {
	addr     string
	admin    *redis.Client // the harness's own connection: FLUSHALL, CONFIG, INFO
	warmup   time.Duration
	duration time.Duration
	samples  int // runs of each point: every figure is their median, with its interval
}

// inTurns measures k contenders h.samples times, taking turns run by run,
// so that a drift in the machine's background load falls on all of them
// alike, and returns each one's runs (Runs) in a row that is its median
// run, in order, with the errors of its other runs. measure(i) measures
// contender i once.
func (h *harness) inTurns(k int, measure func(i int) (row, error)) ([]row, error) {
	runs := make([][]row, k)
	for range h.samples {
		for i := range k {
			r, err := measure(i)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], r)
		}
	}
	rows := make([]row, k)
	for i, rs := range runs {
		rows[i] = medianRun(rs)
		rows[i].Runs = make([]sample, len(rs))
		for j, r := range rs {
			rows[i].Runs[j] = r.sample
			rows[i].OtherErrors += r.Errors
		}
		rows[i].OtherErrors -= rows[i].Errors
	}
	return rows, nil
}

// medianRun returns the median measurement of rs, which are the
// repetitions of one point: by decisions/s, or in scenario s by Redis's
// time per script call (of an even number, the upper of the middle two).
// The columns without an interval are its figures.
func medianRun(rs []row) row {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b row) int { return cmp.Compare(a.rank(), b.rank()) })
	return sorted[len(sorted)/2]
}

// rttCounter is a go-redis hook counting round trips: each command sent
// alone and each pipeline or transaction is one.
type rttCounter struct{ n atomic.Int64 }

func (*rttCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *rttCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *rttCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// client returns a fresh go-redis client for one run, with the round-trip
// counter and a pool of poolSize connections (0: go-redis's default, 10
// per GOMAXPROCS). Every contender of the run uses it.
func (h *harness) client(poolSize int) (*redis.Client, *rttCounter) {
	// The same options for every library: go-redis's defaults but for the
	// pool, and socket I/O that stops at a context's deadline, which the
	// README asks for (only redlimit's middleware sets deadlines here).
	rdb := redis.NewClient(&redis.Options{Addr: h.addr, PoolSize: poolSize, ContextTimeoutEnabled: true})
	rtt := &rttCounter{}
	rdb.AddHook(rtt)
	return rdb, rtt
}

// flush empties Redis.
func (h *harness) flush(ctx context.Context) error {
	return h.admin.FlushAll(ctx).Err()
}

// op is one decision of a workload, made by caller worker as its i-th.
type op func(ctx context.Context, worker, i int) (allowed bool, err error)

// sample is the outcome of one measurement. A call that returned an error
// is no decision: it counts in Errors only, and its latency is left out.
type sample struct {
	Decisions, Allowed, Errors int64
	Elapsed                    time.Duration
	P50, P99                   time.Duration
	Allocs                     float64 // heap allocations per decision
	Redis                      *redisCost
}

// redisCost is what Redis spent, per decision.
type redisCost struct {
	Commands   float64 // commands executed, those run by scripts included
	RoundTrips float64 // commands and pipelines sent by the client
	CPU        float64 // server CPU, user+sys, in microseconds
	// CmdTime is the time Redis spent executing the commands the client
	// sent, in microseconds: the scripts' time when scripts ran (it
	// includes the commands they ran, which commandstats also lists on
	// their own), else every command's.
	CmdTime float64
	// Script is the time of the script calls (EVAL, EVALSHA and their _RO
	// forms, FCALL), in microseconds, and ScriptCalls their number.
	Script, ScriptCalls float64
	// Mix is the calls of each command, those run by scripts included.
	Mix map[string]float64
}

// rate returns decisions per second.
func (s sample) rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Decisions) / s.Elapsed.Seconds()
}

// measure runs op in callers goroutines for the warm-up, then for the
// duration, recording every call's latency. With rtt non-nil it also takes
// Redis's figures: command stats and CPU (reset just before) and round trips.
func (h *harness) measure(ctx context.Context, callers int, rtt *rttCounter, o op) (sample, error) {
	warm := h.run(ctx, callers, h.warmup, o, nil)
	perCaller := int(float64(warm.Decisions)/h.warmup.Seconds()*h.duration.Seconds()/float64(callers)*1.3) + 1024
	lat := make([][]time.Duration, callers)
	for i := range lat {
		lat[i] = make([]time.Duration, 0, perCaller)
	}

	var cpu0 float64
	if rtt != nil {
		if err := h.admin.ConfigResetStat(ctx).Err(); err != nil {
			return sample{}, err
		}
		var err error
		if cpu0, err = h.cpu(ctx); err != nil {
			return sample{}, err
		}
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var rtt0 int64
	if rtt != nil {
		rtt0 = rtt.n.Load()
	}

	s := h.run(ctx, callers, h.duration, o, lat)

	var rtt1 int64
	if rtt != nil {
		rtt1 = rtt.n.Load()
	}
	runtime.ReadMemStats(&m1)
	switch {
	case s.Decisions == 0 && s.Errors == 0:
		return s, errors.New("no calls")
	case s.Decisions == 0:
		return s, nil // every call failed: the row shows the errors alone
	}
	n := float64(s.Decisions)
	s.Allocs = float64(m1.Mallocs-m0.Mallocs) / n
	all := slices.Concat(lat...)
	slices.Sort(all)
	s.P50, s.P99 = all[len(all)/2], all[len(all)*99/100]
	if rtt != nil {
		stats, err := h.commandStats(ctx)
		if err != nil {
			return s, err
		}
		cpu1, err := h.cpu(ctx)
		if err != nil {
			return s, err
		}
		s.Redis = costOf(stats, n)
		s.Redis.RoundTrips = float64(rtt1-rtt0) / n
		s.Redis.CPU = (cpu1 - cpu0) * 1e6 / n
	}
	return s, nil
}

// costOf returns Redis's command figures of n decisions from commandstats.
func costOf(stats map[string]cmdStat, n float64) *redisCost {
	c := &redisCost{Mix: map[string]float64{}}
	var all float64
	for name, st := range stats {
		c.Commands += float64(st.Calls) / n
		c.Mix[name] = float64(st.Calls) / n
		all += float64(st.Usec) / n
		if scriptCommands[name] {
			c.Script += float64(st.Usec) / n
			c.ScriptCalls += float64(st.Calls) / n
		}
	}
	c.CmdTime = all
	if c.ScriptCalls > 0 {
		c.CmdTime = c.Script
	}
	return c
}

// scriptCommands are the commands that run a script, as commandstats names
// them. Redis counts a script's time in its call and the commands it runs
// under their own names as well.
var scriptCommands = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true,
}

// run calls o in callers goroutines, started together, for d, and appends
// each call's latency to lat[worker] when lat is not nil.
func (h *harness) run(ctx context.Context, callers int, d time.Duration, o op, lat [][]time.Duration) sample {
	var (
		stop                       atomic.Bool
		start                      = make(chan struct{})
		wg                         sync.WaitGroup
		decisions, allowed, failed atomic.Int64
	)
	for w := range callers {
		wg.Go(func() {
			var n, ok, bad int64
			<-start
			for i := 0; !stop.Load(); i++ {
				t := time.Now()
				a, err := o(ctx, w, i)
				d := time.Since(t)
				if err != nil {
					bad++ // not a decision
					continue
				}
				if lat != nil {
					lat[w] = append(lat[w], d)
				}
				n++
				if a {
					ok++
				}
			}
			decisions.Add(n)
			allowed.Add(ok)
			failed.Add(bad)
		})
	}
	t0 := time.Now()
	close(start)
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return sample{
		Decisions: decisions.Load(), Allowed: allowed.Load(), Errors: failed.Load(),
		Elapsed: time.Since(t0),
	}
}

// errNotFull reports a fill that was not granted in full.
var errNotFull = errors.New("fill not granted in full")

// fill uses up n permits of key: in one call when c can, else with n
// Decide calls from 32 goroutines, which must all be allowed.
func fill(ctx context.Context, c Contender, key string, n int64) error {
	if f, ok := c.(filler); ok {
		return f.Fill(ctx, key, n)
	}
	var granted atomic.Int64
	err := forEach(int(n), 32, func(int) error {
		ok, err := c.Decide(ctx, key)
		if ok {
			granted.Add(1)
		}
		return err
	})
	if g := granted.Load(); err == nil && g != n {
		err = fmt.Errorf("%w: %d of %d", errNotFull, g, n)
	}
	return err
}

// forEach calls f(i) for i in [0, n) from the given number of goroutines,
// and returns the first error.
func forEach(n, workers int, f func(i int) error) error {
	var (
		next     atomic.Int64
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct {
	Calls int64 // calls=
	Usec  int64 // usec=: time spent executing it, in microseconds
}

// commandStats returns the commands Redis executed since CONFIG RESETSTAT,
// by name, those run inside scripts included, leaving out the harness's
// INFO and CONFIG calls.
func (h *harness) commandStats(ctx context.Context) (map[string]cmdStat, error) {
	info, err := h.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return parseCommandStats(info)
}

// parseCommandStats parses INFO commandstats for commandStats.
func parseCommandStats(info string) (map[string]cmdStat, error) {
	stats := map[string]cmdStat{}
	for line := range strings.Lines(info) {
		key, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(key, "cmdstat_")
		if !ok || !isCmd || name == "info" || name == "config" || strings.HasPrefix(name, "config|") {
			continue
		}
		var st cmdStat
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k != "calls" && k != "usec" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats %q: %w", line, err)
			}
			if k == "calls" {
				st.Calls = n
			} else {
				st.Usec = n
			}
		}
		stats[name] = st
	}
	return stats, nil
}

// cpu returns Redis's used_cpu_user + used_cpu_sys, in seconds.
func (h *harness) cpu(ctx context.Context) (float64, error) {
	f, err := h.infoFields(ctx, "cpu", "used_cpu_user", "used_cpu_sys")
	return f[0] + f[1], err
}

// usedMemory returns Redis's used_memory, in bytes.
func (h *harness) usedMemory(ctx context.Context) (float64, error) {
	f, err := h.infoFields(ctx, "memory", "used_memory")
	return f[0], err
}

// keyBytes returns the sum of MEMORY USAGE, counting every element, over
// every key.
func (h *harness) keyBytes(ctx context.Context) (float64, error) {
	var total int64
	it := h.admin.Scan(ctx, 0, "*", 1000).Iterator()
	batch := make([]string, 0, 1000)
	sum := func() error {
		cmds, err := h.admin.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.MemoryUsage(ctx, k, 0)
			}
			return nil
		})
		for _, c := range cmds {
			total += c.(*redis.IntCmd).Val()
		}
		batch = batch[:0]
		if errors.Is(err, redis.Nil) { // a key expired after SCAN saw it
			err = nil
		}
		return err
	}
	for it.Next(ctx) {
		if batch = append(batch, it.Val()); len(batch) == cap(batch) {
			if err := sum(); err != nil {
				return 0, err
			}
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	return float64(total), sum()
}

// infoFields returns the numeric fields of one INFO section, in order.
func (h *harness) infoFields(ctx context.Context, section string, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	info, err := h.admin.Info(ctx, section).Result()
	if err != nil {
		return out, err
	}
	for line := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if i := slices.Index(names, name); ok && i >= 0 {
			if out[i], err = strconv.ParseFloat(v, 64); err != nil {
				return out, fmt.Errorf("INFO %s %s: %w", section, name, err)
			}
		}
	}
	return out, nil
}
