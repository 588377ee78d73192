package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeRuns is the number of runs of each point of fakeReport: the fewest
// that give a 95% interval, the smallest and the largest run.
const fakeRuns = 6

// fakeReport has rows for every scenario at known rates and Redis costs,
// and no Redis behind it. In g, ulule/limiter's run at 64 callers returned
// errors; in f, other runs of httprate-redis at 64 callers did.
func fakeReport() *report {
	r := &report{Env: "test machine", Total: time.Minute, Samples: fakeRuns}
	rates := map[string]float64{
		libRedlimit: 20_000, libRedlimitNoCoalesce: 12_000, libRedlimitNoCache: 15_000, libRedisRate: 40_000,
		libUlule: 30_000, libHTTPRate: 8_000, libFloor: 50_000,
	}
	// Each point has fakeRuns runs, its rate and latencies spread by ±2.5%
	// around the given ones, which are their medians; the runs share one
	// Redis cost.
	add := func(scenario, cs, lib string, callers int, rate float64, p50 time.Duration, allocs float64, redis bool) *row {
		s := sample{Decisions: int64(rate), Allowed: int64(rate) / 2, Elapsed: time.Second, P50: p50, P99: 2 * p50, Allocs: allocs}
		if redis {
			s.Redis = &redisCost{Commands: 3, RoundTrips: 1, CPU: 12.5, CmdTime: 8, Script: 8, ScriptCalls: 1,
				Mix: map[string]float64{"evalsha": 1, "get": 1, "set": 0.001}}
			if lib == libHTTPRate {
				s.Redis.Script, s.Redis.ScriptCalls, s.Redis.CmdTime = 0, 0, 5
			}
		}
		x := row{Scenario: scenario, Case: cs, Library: lib, Callers: callers, sample: s}
		for i := range fakeRuns {
			f := 1 + (float64(i)-2.5)/100
			run := s
			run.Decisions, run.Allowed = int64(math.Round(rate*f)), int64(math.Round(rate*f))/2
			run.P50, run.P99 = time.Duration(float64(p50)*f), time.Duration(float64(2*p50)*f)
			x.Runs = append(x.Runs, run)
		}
		r.Rows = append(r.Rows, x)
		return &r.Rows[len(r.Rows)-1]
	}
	for _, sc := range []string{"a", "b", "c", "f", "g"} {
		for lib, rate := range rates {
			cs := ""
			if sc == "a" {
				cs = poolDefault
			}
			for _, n := range callerCounts {
				if sc == "b" && lib == libRedlimit {
					rate = 2_000_000
				}
				x := add(sc, cs, lib, n, rate, time.Duration(1e9/rate*float64(n)), 20, true)
				switch {
				case sc == "g" && lib == libRedlimit:
					x.Redis.Script = 6
				case sc == "g" && lib == libUlule && n == 64:
					x.Errors = 3
				case sc == "f" && lib == libHTTPRate && n == 64:
					x.OtherErrors = 2
				}
			}
			if sc == "a" {
				add(sc, poolCallers, lib, 64, rate+10_000, time.Millisecond, 20, true)
			}
		}
	}
	for i := range bigLimits {
		for _, n := range callerCounts {
			add("d", bigCase(i), libRedlimitNoCache, n, 15_000, time.Duration(50+i)*time.Microsecond, 30, true)
		}
	}
	for _, fw := range frameworks {
		add("e", fw.name, variantBare, 1, 1_000_000, time.Microsecond, 10, false)
		add("e", fw.name, variantRedis, 1, 10_000, 100*time.Microsecond, 60, true)
	}
	// gRPC on the memory core: 39 µs and 30 allocations over the bare
	// server, of which the core decision alone is 2 µs and 9, and grpc's
	// cost of the fields 9 µs and 20.
	add("e", coreAlone, variantMemory, 1, 500_000, 2*time.Microsecond, 9, false)
	add("e", "gRPC", variantMemory, 1, 25_000, 40*time.Microsecond, 40, false)
	add("e", "gRPC", variantFields, 1, 100_000, 10*time.Microsecond, 30, false)
	// Scenario i: p50s of 100, 90, 80, 120, 88 and 50 µs, the runs of each
	// library spread alike, so that each run's ratio is the ratio of the
	// medians; httprate-redis's runs returned errors.
	for lib, p50 := range map[string]float64{libRedlimit: 100, libRedisRate: 90, libUlule: 80, libHTTPRate: 120, libGrantFloor: 88, libFloor: 50} {
		x := add("i", "", lib, 1, 1e6/p50, time.Duration(p50*1e3), 0, false)
		if lib == libHTTPRate {
			x.Errors = 1
		}
	}
	script := func(cs, lib string, callers int, perCall, calls float64) *row {
		x := add("s", cs, lib, callers, 1000, time.Millisecond, 0, true)
		x.Redis.Script, x.Redis.ScriptCalls, x.Redis.CPU = perCall*calls, calls, 3*calls
		return x
	}
	script(casePipelines, scriptReturnOne, scriptPipeliners, 2, 32)
	script(casePipelines, scriptStraight, scriptPipeliners, 10, 32)
	script(caseLibrary, libRedlimit, scriptCallers, 24, 0.5) // coalesced: two decisions per script call
	script(caseLibrary, libSettleBelow, scriptCallers, 7, 1)
	script(caseLibrary, libSettleAbove, scriptCallers, 7.5, 1)
	script(caseLibrary, libRefund, scriptCallers, 6, 1).Errors = 2
	script(caseLibrary, libRedisRate, scriptCallers, 9, 1)
	script(caseLibrary, libFloor, scriptCallers, 4, 1)
	r.Memory = []memRow{
		{Scenario: "a", Library: libRedlimit, Units: allowedKeys, Used: 4_480_000, Keys: 4_400_000},
		{Scenario: "d", Library: libRedlimitNoCache, Units: 100_000, Used: 13_000_000, Keys: 12_000_000},
	}
	r.Notes = []string{"a note"}
	return r
}

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := fakeReport().writeMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"## Targets",
		"| Allowed path (a), 64 callers, default pool: redlimit ÷ fastest peer, decisions/s | **0.50×** [0.49, 0.52] (p=0.002): " +
			"redlimit 20 000 [19 500, 20 500]/s vs redis_rate 40 000 [39 000, 41 000]/s; " +
			"redlimit (no coalescing): 0.30× [0.29, 0.31] (p=0.002), 12 000 [11 700, 12 300]/s; redlimit (no denial cache): 0.38× [0.36, 0.39] (p=0.002), 15 000 [14 625, 15 375]/s |",
		"| Allowed path (a), 64 callers, pool = callers: redlimit ÷ fastest peer, decisions/s | **0.60×** [0.58, 0.62] (p=0.002): " +
			"redlimit 30 000 [29 250, 30 750]/s vs redis_rate 50 000 [48 750, 51 250]/s;",
		"| Denied hot key (b), 64 callers, default pool: redlimit ÷ fastest peer, decisions/s | **50.00×** [48.54, 51.51] (p=0.002)",
		"| New keys (f), 64 callers, default pool: redlimit ÷ fastest peer, decisions/s | n/a (errors in httprate-redis) |",
		"| Hot key allowed (g), 64 callers, default pool: redlimit ÷ fastest peer, decisions/s | n/a (errors in ulule/limiter) |",
		"| Hot key allowed (g), 64 callers: redlimit ÷ redis_rate, script µs per decision (target ≤ 1.00×) | " +
			"**0.75×** [0.75, 0.75] (p=0.002): 6.00 [6.00, 6.00] µs vs 8.00 [8.00, 8.00] µs |",
		"| Redis capacity, many keys (a, 64 callers, default pool): decisions/s one Redis core could serve (1e6 ÷ Redis CPU µs/dec) | " +
			"redlimit **80 000 [80 000, 80 000]**; redlimit (no coalescing) 80 000 [80 000, 80 000]; redlimit (no denial cache) 80 000 [80 000, 80 000]; " +
			"redis_rate 80 000 [80 000, 80 000]; ulule/limiter 80 000 [80 000, 80 000]; httprate-redis 80 000 [80 000, 80 000]; floor 80 000 [80 000, 80 000] |",
		"| Redis capacity, hot key (g, 64 callers, default pool): decisions/s one Redis core could serve (1e6 ÷ Redis CPU µs/dec) | ",
		"ulule/limiter n/a (errors in ulule/limiter)",
		"| Script cost (s): redlimit's acquire ÷ the straight-line script (target ≤ 1.10×), Redis script µs per decision | " +
			"**1.20×** [1.20, 1.20] (p=0.002): 12.00 [12.00, 12.00] µs vs 10.00 [10.00, 10.00] µs; beyond return 1 called the same way (medians): 8.00 µs vs 8.00 µs |",
		"| Script cost (s): redlimit's acquire ÷ redis_rate's script (target ≤ 1.50×), Redis script µs per decision | " +
			"**1.33×** [1.33, 1.33] (p=0.002): 12.00 [12.00, 12.00] µs vs 9.00 [9.00, 9.00] µs;",
		"| One caller p50 (a, default pool): redlimit ÷ floor | **2.50×** [2.43, 2.58] (p=0.002): 50.0 [48.8, 51.2] µs vs 20.0 [19.5, 20.5] µs |",
		"p50 at 100 000 ÷ p50 at 10 permits (d), 1 caller: redlimit (no denial cache) | **1.04×** [1.01, 1.07] (p=0.015): 52.0 [50.7, 53.3] µs vs 50.0 [48.8, 51.2] µs |",
		"net/http, redlimit (Redis), 1 caller: Δ mean, Δ p50, Δ allocs per request vs the bare framework | **+99.0 µs**, **+99.0 µs**, **+50.0 allocs**",
		"beyond the core decision (a, 1 caller: 50.0 µs mean, 20.0 allocs): +49.0 µs, +30.0 allocs",
		"redlimit (memory core), 1 caller: Δ mean, Δ p50, Δ allocs per request vs the bare framework | not measured in this run",
		"| Adapter overhead (e), gRPC, redlimit (memory core), 1 caller: Δ mean, Δ p50, Δ allocs per request vs the bare framework | " +
			"**+39.0 µs**, **+39.0 µs**, **+30.0 allocs**; the adapter's own part, beyond the core decision alone (2.00 µs mean, 2.00 µs p50, 9.0 allocs): " +
			"+37.0 µs mean, **+37.0 µs p50**, **+21.0 allocs**; beyond the core decision and grpc's cost of the five fields " +
			"(+9.0 µs mean, +9.0 µs p50, +20.0 allocs): +28.0 µs mean, **+28.0 µs p50**, **+1.0 allocs** |",
		"| Framework cost (e), gRPC, the five rate limit fields alone (no decision), 1 caller: Δ mean, Δ p50, Δ allocs per request vs the bare framework | " +
			"**+9.0 µs**, **+9.0 µs**, **+20.0 allocs** |",
		"| go-redis pool | library | callers | decisions/s | p50 | p99 | allocs/dec | Redis cmds/dec | round trips/dec | " +
			"Redis CPU µs/dec | Redis cmd time µs/dec | script µs/dec | allowed | errors |",
		"| default | redlimit (no coalescing) | 64 | 12 000 [11 700, 12 300] | 5333.3 [5200.0, 5466.7] µs | 10666.7 [10400.0, 10933.3] µs | " +
			"20.0 | 3.00 | 1.00 | 12.5 | 8.0 | 8.0 | 50.0% | 0 |",
		"| = callers | redis_rate | 64 | 50 000 [48 750, 51 250] | 1000.0 [975.0, 1025.0] µs | 2000.0 [1950.0, 2050.0] µs | 20.0 |",
		"## Scenario f: new keys",
		"| httprate-redis | 64 | 8 000 [7 800, 8 200] | 8000.0 [7800.0, 8200.0] µs | 16000.0 [15600.0, 16400.0] µs | 20.0 | 3.00 | 1.00 | 12.5 | 5.0 | – | 50.0% | 0 (+2 in other runs) |",
		"## Scenario g: hot key, allowed",
		"| ulule/limiter | 64 | 30 000 [29 250, 30 750] | 2133.3 [2080.0, 2186.7] µs | 4266.7 [4160.0, 4373.3] µs | 20.0 | 3.00 | 1.00 | 12.5 | 8.0 | 8.0 | 50.0% | 3 |",
		"| a | redlimit | 64 | EVALSHA 1.00, GET 1.00, SET 0.001 |",
		"| g | redlimit (no coalescing) | 64 | EVALSHA 1.00, GET 1.00, SET 0.001 |",
		"| redlimit | 448 | 440 |",
		"| redlimit (no denial cache) | 100 000 | 13 000 000 | 130.0 | 12 000 000 | 120.0 | 120 |",
		"| redlimit (no denial cache) | 1.04× [1.01, 1.07] (p=0.015) | 1.04× [1.01, 1.07] (p=0.015) | 1.04× [1.01, 1.07] (p=0.015) |",
		"| gin | redlimit (Redis) | 1 | 10 000 [9 750, 10 250] | 100.0 [97.5, 102.5] µs | 200.0 [195.0, 205.0] µs | 60.0 | 3.00 | 1.00 | 12.5 | 8.0 | 8.0 | +99.0 µs | +50.0 | 0 |",
		"| return 1 | pipelines of 32 EVALSHA | 32 000 | 1.00 | 2.00 [2.00, 2.00] | +0.00 | 0.20× [0.20, 0.20] (p=0.002) | 3.00 | 0 |",
		"| straight-line (Redisson layout) | pipelines of 32 EVALSHA | 32 000 | 1.00 | 10.00 [10.00, 10.00] | +8.00 | – | 3.00 | 0 |",
		"| redlimit's acquire | the library, 64 goroutines | 1 000 | 0.50 | 12.00 [12.00, 12.00] | +8.00 | 1.20× [1.20, 1.20] (p=0.002) | 1.50 | 0 |",
		"| redlimit's settle, 2 → 3 permits (above the reservation) | the library, 64 goroutines | 1 000 | 1.00 | 7.50 [7.50, 7.50] | +3.50 | 0.75× [0.75, 0.75] (p=0.002) | 3.00 | 0 |",
		"| After a decision (s): redlimit's settle and refund, Redis script µs per call, next to its acquire's | " +
			"acquire **12.00 [12.00, 12.00] µs** per decision (24.00 [24.00, 24.00] µs per script call); settle 2 → 1 permits **7.00 [7.00, 7.00] µs**; " +
			"settle 2 → 3 permits **7.50 [7.50, 7.50] µs**; refund: n/a (errors in redlimit's refund (2 permits)) |",
		"| gRPC | redlimit (Redis) | 1 | 10 000 [9 750, 10 250] | 100.0 [97.5, 102.5] µs | 200.0 [195.0, 205.0] µs | 60.0 | 3.00 | 1.00 | 12.5 | 8.0 | 8.0 | +99.0 µs | +50.0 | 0 |",
		"| floor | the library, 64 goroutines | 1 000 | 1.00 | 4.00 [4.00, 4.00] | +0.00 | 0.40× [0.40, 0.40] (p=0.002) | 3.00 | 0 |",
		"| One caller, in turns decision by decision (i): p50 ÷ the floor's, run by run | redlimit **2.00×** [2.00, 2.00] (100.0 [97.5, 102.5] µs); " +
			"redis_rate **1.80×** [1.80, 1.80] (90.0 [87.8, 92.2] µs); ulule/limiter **1.60×** [1.60, 1.60] (80.0 [78.0, 82.0] µs); " +
			"httprate-redis: n/a (errors in httprate-redis); the floor 50.0 [48.8, 51.2] µs |",
		"| One caller, in turns decision by decision (i): redlimit's p50 ÷ the fastest peer's, run by run | **1.25×** [1.25, 1.25] (ulule/limiter) |",
		"| One caller, in turns decision by decision (i): the grant floor's p50 (Redisson's layout, four commands, no logic) ÷ the fastest peer's, run by run | **1.10×** [1.10, 1.10] (ulule/limiter) |",
		"| grant floor (Redisson layout) | 88.0 [85.8, 90.2] µs | 176.0 [171.6, 180.4] µs | 88.0 [85.9, 90.3] µs | 1.76× [1.76, 1.76] | 11 363 | 0 |",
		"## Scenario i: one caller, the libraries in turns decision by decision",
		"| library | p50 | p99 | mean | p50 ÷ the floor's, run by run | decisions (median run) | errors |",
		"| redlimit | 100.0 [97.5, 102.5] µs | 200.0 [195.0, 205.0] µs | 100.0 [97.6, 102.6] µs | 2.00× [2.00, 2.00] | 10 000 | 0 |",
		"| httprate-redis | 120.0 [117.0, 123.0] µs | 240.0 [234.0, 246.0] µs | 120.0 [117.1, 123.1] µs | – | 8 333 | 1 |",
		"| floor | 50.0 [48.8, 51.2] µs | 100.0 [97.5, 102.5] µs | 50.0 [48.8, 51.3] µs | – | 20 000 | 0 |",
		"Each figure is the median of 6 runs with its confidence interval in brackets",
		"- a note",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestSVG(t *testing.T) {
	var b bytes.Buffer
	if err := fakeReport().writeSVG(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
	}
	for _, want := range []string{"<svg ", "a: allowed path", "b: denied hot key", "c: mixed 80/20",
		">redlimit</text>", ">redlimit (no coalescing)</text>", ">redlimit (no denial cache)</text>", ">floor</text>",
		">2M</text>", ">40k</text>", ">10k</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if strings.Contains(svg, ">60k</text>") { // the floor with pool = callers in a is not charted
		t.Error("SVG charts scenario a with pool = callers")
	}
}

func TestFormats(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{count(1234567.4), "1 234 567"}, {count(999), "999"}, {count(-1500), "-1 500"},
		{short(100), "100"}, {short(12345), "12.3k"}, {short(2_180_000), "2.18M"}, {short(1000), "1k"},
		{signed(1.25), "+1.2"}, {signed(-3), "-3.0"}, {ratio(1, 0), "–"}, {percent(1, 4), "25.0%"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=100,usec=2000,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hmget:calls=100,usec=300,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_zadd:calls=100,usec=400,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=2,usec=90,usec_per_call=45.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n"
	stats, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(stats), 3; got != want {
		t.Fatalf("parsed %d commands (%v), want %d: INFO and CONFIG are the harness's", got, stats, want)
	}
	if got, want := stats["evalsha"], (cmdStat{Calls: 100, Usec: 2000}); got != want {
		t.Errorf("evalsha = %+v, want %+v", got, want)
	}

	// A script's time includes the commands it ran: they are not added again.
	c := costOf(stats, 100)
	if c.Commands != 3 || c.Script != 20 || c.ScriptCalls != 1 || c.CmdTime != 20 || c.Mix["zadd"] != 1 {
		t.Errorf("costOf(scripted) = %+v, want 3 commands, 20 µs of script and command time, 1 script call", c)
	}
	// Without scripts, every command is the client's.
	delete(stats, "evalsha")
	if c := costOf(stats, 100); c.CmdTime != 7 || c.Script != 0 {
		t.Errorf("costOf(no scripts) = %+v, want 7 µs of command time and no script time", c)
	}
}

func TestErrorsAreNoDecisions(t *testing.T) {
	h := &harness{}
	fails := errors.New("fails")
	s := h.run(context.Background(), 2, 20*time.Millisecond, func(_ context.Context, _, i int) (bool, error) {
		if i%2 == 1 {
			return false, fails
		}
		return true, nil
	}, nil)
	if s.Decisions == 0 || s.Errors == 0 || s.Allowed != s.Decisions || s.Errors < s.Decisions-2 || s.Errors > s.Decisions+2 {
		t.Errorf("run = %d decisions, %d allowed, %d errors; want half the calls as decisions, all allowed, and the other half as errors",
			s.Decisions, s.Allowed, s.Errors)
	}
}

func TestInTurns(t *testing.T) {
	h := &harness{samples: 3}
	var order []int
	runs := map[int][]row{
		0: {{Library: "x", sample: sample{Decisions: 10, Elapsed: time.Second}}, {Library: "x", sample: sample{Decisions: 30, Elapsed: time.Second, Errors: 1}},
			{Library: "x", sample: sample{Decisions: 20, Elapsed: time.Second, Errors: 4}}},
		1: {{Library: "y", sample: sample{Decisions: 5, Elapsed: time.Second}}, {Library: "y", sample: sample{Decisions: 5, Elapsed: time.Second}},
			{Library: "y", sample: sample{Decisions: 5, Elapsed: time.Second}}},
	}
	rows, err := h.inTurns(2, func(i int) (row, error) {
		order = append(order, i)
		r := runs[i][0]
		runs[i] = runs[i][1:]
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := order, []int{0, 1, 0, 1, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
	if x := rows[0]; x.Decisions != 20 || x.Errors != 4 || x.OtherErrors != 1 || !x.failed() {
		t.Errorf("median of x = %d decisions, %d errors, %d in other runs; want 20, 4, 1", x.Decisions, x.Errors, x.OtherErrors)
	}
	// Every run is kept, in the order taken, for the intervals.
	if got, want := rows[0].values(byRate), []float64{10, 30, 20}; !slices.Equal(got, want) {
		t.Errorf("runs of x = %v decisions/s, want %v", got, want)
	}
	if rows[1].failed() {
		t.Errorf("y failed: %+v", rows[1])
	}
}
