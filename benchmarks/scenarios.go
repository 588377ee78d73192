package main

import (
	"context"
	"fmt"
	"log"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Workload parameters.
const (
	allowedKeys  = 10_000        // distinct keys of the allowed path
	allowedLimit = 1_000_000     // permits per window on them: never reached
	hotKey       = "hot"         // the one key of the denied path
	hotLimit     = 10            // permits per window on it, used up before measuring
	bigKey       = "big"         // the one key of scenario d
	globalKey    = "global"      // the one key of scenario g
	globalLimit  = 1_000_000_000 // permits per window on it: never reached
)

// Cases of scenario a: go-redis's connection pool.
const (
	poolDefault = "default"   // go-redis's default PoolSize, 10 per GOMAXPROCS
	poolCallers = "= callers" // PoolSize equal to the number of callers
)

// defaultPoolSize is go-redis's default PoolSize.
func defaultPoolSize() int { return 10 * runtime.GOMAXPROCS(0) }

// poolCases returns the pool cases of scenario a at callers. Up to the
// default pool size, a pool of one connection per caller behaves as the
// default one (no caller waits for a connection, and go-redis opens them
// only as they are needed), so it is measured only above it.
func poolCases(callers int) []string {
	if callers > defaultPoolSize() {
		return []string{poolDefault, poolCallers}
	}
	return []string{poolDefault}
}

var (
	callerCounts = []int{1, 16, 64}
	bigLimits    = []int64{10, 1_000, 100_000}
	keys         = names("k:", allowedKeys)
)

// names returns prefix0 ... prefix(n-1).
func names(prefix string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = prefix + strconv.Itoa(i)
	}
	return s
}

// keyOf spreads callers over the allowed keys: each starts at its own offset
// and goes round robin.
func keyOf(worker, callers, i int) string {
	return keys[(worker*allowedKeys/callers+i)%allowedKeys]
}

// row is one measurement: scenario, case (pool, limit, framework or script
// variant), library and number of concurrent callers. Measured in turns
// (inTurns), it is the point's median run, and Runs holds all its runs.
type row struct {
	Scenario string
	Case     string
	Library  string
	Callers  int
	sample
	Runs        []sample // every run of the point, in the order taken
	OtherErrors int64    // errors in the other runs of the same point
}

// rank is what the runs of one point are ranked by for their median: Redis's
// time per script call in scenario s, decisions/s elsewhere.
func (x row) rank() float64 {
	if x.Scenario == "s" {
		return x.perScriptDecision()
	}
	return x.rate()
}

// perScriptDecision is Redis's time per script call, in microseconds.
func (x row) perScriptDecision() float64 {
	switch {
	case x.Redis == nil || x.Redis.ScriptCalls == 0:
		return 0
	case x.Case == casePipelines: // a "decision" of the harness is a pipeline of script calls, each one decision
		return x.Redis.Script / x.Redis.ScriptCalls
	}
	return x.Redis.Script
}

// failed reports whether a run of the point returned errors.
func (x row) failed() bool { return x.Errors > 0 || x.OtherErrors > 0 }

// memRow is Redis memory used by one library's keys.
type memRow struct {
	Scenario string
	Library  string
	Units    int64   // keys (scenario a) or permits in the window (scenario d)
	Used     float64 // used_memory delta: the keys, and the noise of client buffers
	Keys     float64 // MEMORY USAGE of every key, summed
}

// setup prepares one measurement on the run's client and returns its
// workload.
type setup func(ctx context.Context, rdb *redis.Client, callers int) (op, error)

// point flushes Redis and makes the measurement id (its scenario, case,
// library and callers) with a fresh client, whose pool has one connection
// per caller in the case poolCallers. Redis's figures are taken when
// usesRedis.
func (h *harness) point(ctx context.Context, id row, usesRedis bool, s setup) (row, error) {
	if err := h.flush(ctx); err != nil {
		return row{}, err
	}
	pool := 0
	if id.Case == poolCallers {
		pool = id.Callers
	}
	rdb, rtt := h.client(pool)
	defer rdb.Close()
	o, err := s(ctx, rdb, id.Callers)
	if err != nil {
		return row{}, fmt.Errorf("%s %s %s: %w", id.Scenario, id.Case, id.Library, err)
	}
	if !usesRedis {
		rtt = nil
	}
	id.sample, err = h.measure(ctx, id.Callers, rtt, o)
	if err != nil {
		return row{}, fmt.Errorf("%s %s %s x%d: %w", id.Scenario, id.Case, id.Library, id.Callers, err)
	}
	logRow(id)
	return id, nil
}

// allowedPath is scenario a: every decision on one of 10 000 keys far below
// its limit.
func allowedPath(lib library) setup {
	return func(ctx context.Context, rdb *redis.Client, callers int) (op, error) {
		c, err := lib.new(rdb, allowedLimit)
		if err != nil {
			return nil, err
		}
		// Every key is active before the run, for every library alike, so
		// that the run measures the steady state of many clients rather
		// than the first decision of each (which scenario f measures).
		if err := touch(ctx, c, keys); err != nil {
			return nil, err
		}
		return func(ctx context.Context, w, i int) (bool, error) {
			return c.Decide(ctx, keyOf(w, callers, i))
		}, nil
	}
}

// newKeysPath is scenario f: every decision is the first of a new key, as
// when each request comes from a client never seen before.
func newKeysPath(lib library) setup {
	return func(_ context.Context, rdb *redis.Client, _ int) (op, error) {
		c, err := lib.new(rdb, allowedLimit)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, w, i int) (bool, error) {
			return c.Decide(ctx, "new:"+strconv.Itoa(w)+":"+strconv.Itoa(i))
		}, nil
	}
}

// hot returns a contender whose hot key is used up.
func hot(ctx context.Context, lib library, rdb *redis.Client) (Contender, error) {
	c, err := lib.new(rdb, hotLimit)
	if err != nil {
		return nil, err
	}
	return c, fill(ctx, c, hotKey, hotLimit)
}

// deniedPath is scenario b: every decision on one used-up key.
func deniedPath(lib library) setup {
	return func(ctx context.Context, rdb *redis.Client, _ int) (op, error) {
		c, err := hot(ctx, lib, rdb)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, _, _ int) (bool, error) {
			return c.Decide(ctx, hotKey)
		}, nil
	}
}

// mixedPath is scenario c: one decision in five on the used-up hot key, the
// others on the allowed keys.
func mixedPath(lib library) setup {
	return func(ctx context.Context, rdb *redis.Client, callers int) (op, error) {
		hc, err := hot(ctx, lib, rdb)
		if err != nil {
			return nil, err
		}
		ac, err := lib.new(rdb, allowedLimit)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, w, i int) (bool, error) {
			if (w+i)%5 == 0 {
				return hc.Decide(ctx, hotKey)
			}
			return ac.Decide(ctx, keyOf(w, callers, i))
		}, nil
	}
}

// globalPath is scenario g: every decision on one key whose limit is never
// reached, as one global limit hit by every request.
func globalPath(lib library) setup {
	return func(_ context.Context, rdb *redis.Client, _ int) (op, error) {
		c, err := lib.new(rdb, globalLimit)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, _, _ int) (bool, error) {
			return c.Decide(ctx, globalKey)
		}, nil
	}
}

// scenario is a scenario whose libraries take turns at each number of
// callers: its id, libraries, workload and cases (nil: one case, "").
type scenario struct {
	id    string
	libs  []library
	s     func(library) setup
	cases func(callers int) []string
}

// runScenarios runs each selected scenario of scs.
func (h *harness) runScenarios(ctx context.Context, scs []scenario) ([]row, error) {
	var rows []row
	for _, sc := range scs {
		if !wanted(sc.id) {
			continue
		}
		for _, n := range callerCounts {
			cases := []string{""}
			if sc.cases != nil {
				cases = sc.cases(n)
			}
			rs, err := h.inTurns(len(cases)*len(sc.libs), func(i int) (row, error) {
				lib := sc.libs[i%len(sc.libs)]
				id := row{Scenario: sc.id, Case: cases[i/len(sc.libs)], Library: lib.name, Callers: n}
				return h.point(ctx, id, true, sc.s(lib))
			})
			if err != nil {
				return rows, err
			}
			rows = append(rows, rs...)
		}
	}
	return rows, nil
}

// warmKeys are touched before a memory baseline, then flushed: this opens
// the run's connections, whose buffers count in used_memory, and loads the
// scripts.
var warmKeys = names("warm:", 1000)

// touch makes one decision on each key, from 32 goroutines.
func touch(ctx context.Context, c Contender, ks []string) error {
	return forEach(len(ks), 32, func(i int) error {
		_, err := c.Decide(ctx, ks[i])
		return err
	})
}

// baseline warms c up, flushes Redis and returns used_memory.
func (h *harness) baseline(ctx context.Context, c Contender) (float64, error) {
	if err := touch(ctx, c, warmKeys); err != nil {
		return 0, err
	}
	if err := h.flush(ctx); err != nil {
		return 0, err
	}
	return h.usedMemory(ctx)
}

// keyMemory measures the Redis memory of allowedKeys keys that each got one
// decision, per library.
func (h *harness) keyMemory(ctx context.Context, libs []library) ([]memRow, error) {
	var out []memRow
	for _, lib := range libs {
		m, err := h.libKeyMemory(ctx, lib)
		if err != nil {
			return out, fmt.Errorf("key memory %s: %w", lib.name, err)
		}
		log.Printf("a memory %-28s %8.0f B per key (used_memory), %8.0f B (MEMORY USAGE)", lib.name, m.Used/allowedKeys, m.Keys/allowedKeys)
		out = append(out, m)
	}
	return out, nil
}

// libKeyMemory measures one library for keyMemory.
func (h *harness) libKeyMemory(ctx context.Context, lib library) (memRow, error) {
	rdb, _ := h.client(0)
	defer rdb.Close()
	c, err := lib.new(rdb, allowedLimit)
	if err != nil {
		return memRow{}, err
	}
	before, err := h.baseline(ctx, c)
	if err != nil {
		return memRow{}, err
	}
	if err := touch(ctx, c, keys); err != nil {
		return memRow{}, err
	}
	return h.footprint(ctx, "a", lib.name, allowedKeys, before)
}

// footprint measures what the keys written since used_memory was before
// take.
func (h *harness) footprint(ctx context.Context, scenario, lib string, units int64, before float64) (memRow, error) {
	after, err := h.usedMemory(ctx)
	if err != nil {
		return memRow{}, err
	}
	keys, err := h.keyBytes(ctx)
	return memRow{Scenario: scenario, Library: lib, Units: units, Used: after - before, Keys: keys}, err
}

// bigGroup is one fill of scenario d and the libraries measured on it.
type bigGroup struct {
	fill    library
	measure []library
}

// runD is scenario d: one key whose window is full at 10, 1 000 and
// 100 000 permits per window. Each group fills the key once (after a
// FLUSHALL), then measures each of its libraries at each number of callers
// on that full window. It also returns the memory of each full window.
func (h *harness) runD(ctx context.Context, groups []bigGroup) ([]row, []memRow, error) {
	var (
		rows []row
		mem  []memRow
	)
	for _, permits := range bigLimits {
		for _, g := range groups {
			r, m, err := h.bigGroup(ctx, permits, g)
			rows = append(rows, r...)
			if err != nil {
				return rows, mem, fmt.Errorf("d %s permits=%d: %w", g.fill.name, permits, err)
			}
			mem = append(mem, m)
		}
	}
	return rows, mem, nil
}

// bigGroup fills bigKey at permits per window with g.fill, measuring the
// memory it takes, then measures each of g.measure on it, in turns at each
// number of callers.
func (h *harness) bigGroup(ctx context.Context, permits int64, g bigGroup) ([]row, memRow, error) {
	rdb, rtt := h.client(0)
	defer rdb.Close()
	cs := make([]Contender, len(g.measure))
	for i, lib := range g.measure {
		var err error
		if cs[i], err = lib.new(rdb, permits); err != nil {
			return nil, memRow{}, err
		}
	}
	fc, err := g.fill.new(rdb, permits)
	if err != nil {
		return nil, memRow{}, err
	}
	before, err := h.baseline(ctx, fc)
	if err != nil {
		return nil, memRow{}, err
	}
	t := time.Now()
	if err := fill(ctx, fc, bigKey, permits); err != nil {
		return nil, memRow{}, err
	}
	took := time.Since(t)
	m, err := h.footprint(ctx, "d", g.fill.name, permits, before)
	if err != nil {
		return nil, m, err
	}
	log.Printf("d fill %-28s %7d permits in %v, %.0f B (used_memory), %.0f B (MEMORY USAGE)",
		g.fill.name, permits, took.Round(time.Millisecond), m.Used, m.Keys)
	var rows []row
	for _, n := range callerCounts {
		rs, err := h.inTurns(len(g.measure), func(i int) (row, error) {
			smp, err := h.measure(ctx, n, rtt, func(ctx context.Context, _, _ int) (bool, error) {
				return cs[i].Decide(ctx, bigKey)
			})
			r := row{Scenario: "d", Case: count(float64(permits)), Library: g.measure[i].name, Callers: n, sample: smp}
			if err == nil {
				logRow(r)
			}
			return r, err
		})
		if err != nil {
			return rows, m, err
		}
		rows = append(rows, rs...)
	}
	return rows, m, nil
}

// logRow prints one measurement as it completes.
func logRow(r row) {
	extra := ""
	if r.Redis != nil {
		extra = fmt.Sprintf(" rtt/dec %.2f cmd/dec %.2f cpu µs/dec %.1f script µs/dec %.1f",
			r.Redis.RoundTrips, r.Redis.Commands, r.Redis.CPU, r.Redis.Script)
	}
	log.Printf("%s %-9s %-28s x%-2d %10.0f dec/s p50 %-9v p99 %-9v allowed %s errors %d%s",
		r.Scenario, r.Case, r.Library, r.Callers, r.rate(), r.P50, r.P99,
		percent(r.Allowed, r.Decisions), r.Errors, extra)
}
