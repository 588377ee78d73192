package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// redissonBytesPerPermit is Redisson's published memory cost of a permit in
// the window: about 12.0 MB for 100 000 permits.
const redissonBytesPerPermit = 120

// peerNames are the peer libraries that the targets compare redlimit with.
var peerNames = []string{libRedisRate, libUlule, libHTTPRate}

// redlimitNames are redlimit as it ships and with a feature off.
var redlimitNames = []string{libRedlimit, libRedlimitNoCoalesce, libRedlimitNoCache}

// libraryNames are the libraries of scenarios a to g, in the order the
// targets list them.
var libraryNames = slices.Concat(redlimitNames, peerNames, []string{libFloor})

// report is the outcome of a whole run.
type report struct {
	Env     string        // machine, versions and settings, one line
	Total   time.Duration // wall time of the run
	Samples int           // runs of each point
	Rows    []row
	Memory  []memRow
	Notes   []string
}

// scenarioTitles describes each scenario in one line.
var scenarioTitles = map[string]string{
	"a": "allowed path: 10 000 keys, 1 000 000 permits per minute each",
	"b": "denied path: one used-up key, 10 permits per minute",
	"c": "mixed: 80% on the allowed keys, 20% on the used-up key",
	"d": "large rates: one key with a full window of N permits per minute (all denials)",
	"e": "end to end: in-process GET / through each framework, bare and with the redlimit middleware",
	"f": "new keys: every decision is the first of its key",
	"g": "hot key, allowed: one key at 1 000 000 000 permits per minute, hit by every caller",
	"h": "each library's own middleware through HTTP",
	"i": "one caller, the libraries in turns decision by decision",
	"s": "Redis time per script call (µs)",
}

// find returns the measurement of scenario, case, library and callers.
func (r *report) find(scenario, cs, lib string, callers int) (row, bool) {
	for _, x := range r.Rows {
		if x.Scenario == scenario && x.Case == cs && x.Library == lib && x.Callers == callers {
			return x, true
		}
	}
	return row{}, false
}

// peers returns the peers measured in scenario and case at callers, the
// one with the most decisions per second (median) first.
func (r *report) peers(scenario, cs string, callers int) []row {
	var out []row
	for _, name := range peerNames {
		if x, ok := r.find(scenario, cs, name, callers); ok {
			out = append(out, x)
		}
	}
	slices.SortStableFunc(out, func(a, b row) int { return cmp.Compare(b.median(byRate), a.median(byRate)) })
	return out
}

// erred returns "n/a (errors in …)" when a run of any of xs returned
// errors, else "": no figure is built on a run with errors.
func erred(xs ...row) string {
	var libs []string
	for _, x := range xs {
		if x.failed() && !slices.Contains(libs, x.Library) {
			libs = append(libs, x.Library)
		}
	}
	if len(libs) == 0 {
		return ""
	}
	return "n/a (errors in " + strings.Join(libs, ", ") + ")"
}

// versusPeers compares each redlimit variant measured in scenario and case
// at 64 callers with the fastest peer, in decisions/s: the ratio of the
// medians, "~" when the runs do not differ significantly.
func (r *report) versusPeers(scenario, cs string) string {
	peers := r.peers(scenario, cs, 64)
	if len(peers) == 0 {
		return "not measured"
	}
	if e := erred(peers...); e != "" {
		return e
	}
	peer := peers[0]
	var parts []string
	for _, lib := range redlimitNames {
		ours, ok := r.find(scenario, cs, lib, 64)
		switch {
		case !ok:
			continue
		case lib == libRedlimit && erred(ours) != "":
			parts = append(parts, erred(ours))
		case lib == libRedlimit:
			parts = append(parts, fmt.Sprintf("%s: %s %s/s vs %s %s/s", versus(ours.values(byRate), peer.values(byRate)),
				lib, ours.dist(byRate).format(count), peer.Library, peer.dist(byRate).format(count)))
		case erred(ours) != "":
			parts = append(parts, lib+": "+erred(ours))
		default:
			parts = append(parts, fmt.Sprintf("%s: %s, %s/s", lib, plain(versus(ours.values(byRate), peer.values(byRate))),
				ours.dist(byRate).format(count)))
		}
	}
	return orMissing(strings.Join(parts, "; "))
}

// capacity lists, for each library of scenario and case at 64 callers, the
// decisions per second one Redis core could serve: 1e6 ÷ Redis CPU µs per
// decision, its median over the runs and interval.
func (r *report) capacity(scenario, cs string) string {
	var parts []string
	for _, lib := range libraryNames {
		x, ok := r.find(scenario, cs, lib, 64)
		if !ok {
			continue
		}
		v := erred(x)
		switch {
		case v != "":
		case len(x.values(byCapacity)) == 0:
			v = "–"
		case lib == libRedlimit:
			v = "**" + x.dist(byCapacity).format(count) + "**"
		default:
			v = x.dist(byCapacity).format(count)
		}
		parts = append(parts, lib+" "+v)
	}
	return orMissing(strings.Join(parts, "; "))
}

// scriptRatio is a's Redis script time per decision ÷ b's, in scenario s, with
// what each costs beyond "return 1" called the same way.
func (r *report) scriptRatio(a, b row) string {
	if e := erred(a, b); e != "" {
		return e
	}
	s := fmt.Sprintf("%s: %s µs vs %s µs", versus(a.values(byScript), b.values(byScript)),
		a.dist(byScript).format(fixed2), b.dist(byScript).format(fixed2))
	oneA, okA := r.returnOne(a.Case)
	oneB, okB := r.returnOne(b.Case)
	if okA && okB && erred(oneA, oneB) == "" {
		s += fmt.Sprintf("; beyond return 1 called the same way (medians): %s µs vs %s µs",
			fixed(a.median(byScript)-oneA.median(byScript), 2), fixed(b.median(byScript)-oneB.median(byScript), 2))
	}
	return s
}

// targets returns the ratios the project reports, as (what, figure) pairs.
func (r *report) targets() [][]string {
	var t [][]string
	add := func(what, figure string) { t = append(t, []string{what, figure}) }
	missing := "not measured"

	for _, sc := range []struct{ id, cs, what string }{
		{"a", poolDefault, "Allowed path (a), 64 callers, default pool"},
		{"a", poolCallers, "Allowed path (a), 64 callers, pool = callers"},
		{"b", "", "Denied hot key (b), 64 callers, default pool"},
		{"f", "", "New keys (f), 64 callers, default pool"},
		{"g", "", "Hot key allowed (g), 64 callers, default pool"},
	} {
		add(sc.what+": redlimit ÷ fastest peer, decisions/s", r.versusPeers(sc.id, sc.cs))
	}

	var rtts []string
	for _, n := range callerCounts {
		if x, ok := r.find("b", "", libRedlimit, n); ok && x.Redis != nil {
			rtts = append(rtts, fmt.Sprintf("%s: **%s** (%s in %s denials)", callersText(n), fixed(x.Redis.RoundTrips, 5),
				count(x.Redis.RoundTrips*float64(x.Decisions)), count(float64(x.Decisions))))
		}
	}
	add("Denied hot key (b): redlimit Redis round trips per denied request, by callers", orMissing(strings.Join(rtts, "; ")))

	fig := missing
	ours, ok1 := r.find("g", "", libRedlimit, 64)
	peer, ok2 := r.find("g", "", libRedisRate, 64)
	if ok1 && ok2 && ours.Redis != nil && peer.Redis != nil {
		fig = erred(ours, peer)
		if fig == "" {
			fig = fmt.Sprintf("%s: %s µs vs %s µs", versus(ours.values(byScriptTime), peer.values(byScriptTime)),
				ours.dist(byScriptTime).format(fixed2), peer.dist(byScriptTime).format(fixed2))
		}
	}
	add("Hot key allowed (g), 64 callers: redlimit ÷ redis_rate, script µs per decision (target ≤ 1.00×)", fig)

	for _, c := range []struct{ id, cs, what string }{
		{"a", poolDefault, "many keys (a, 64 callers, default pool)"},
		{"a", poolCallers, "many keys (a, 64 callers, pool = callers)"},
		{"g", "", "hot key (g, 64 callers, default pool)"},
	} {
		add("Redis capacity, "+c.what+": decisions/s one Redis core could serve (1e6 ÷ Redis CPU µs/dec)", r.capacity(c.id, c.cs))
	}

	acquire, ok1 := r.find("s", caseLibrary, libRedlimit, scriptCallers)
	for _, c := range []struct {
		what string
		cs   string
		lib  string
		n    int
	}{
		{"the straight-line script (target ≤ 1.10×)", casePipelines, scriptStraight, scriptPipeliners},
		{"redis_rate's script (target ≤ 1.50×)", caseLibrary, libRedisRate, scriptCallers},
	} {
		fig := missing
		if other, ok2 := r.find("s", c.cs, c.lib, c.n); ok1 && ok2 {
			fig = r.scriptRatio(acquire, other)
		}
		add("Script cost (s): redlimit's acquire ÷ "+c.what+", Redis script µs per decision", fig)
	}

	add("After a decision (s): redlimit's settle and refund, Redis script µs per call, next to its acquire's", r.afterDecision())

	fig = missing
	ours, ok1 = r.find("a", poolDefault, libRedlimit, 1)
	floor, ok2 := r.find("a", poolDefault, libFloor, 1)
	if ok1 && ok2 {
		if fig = erred(ours, floor); fig == "" {
			fig = fmt.Sprintf("%s: %s vs %s", versus(ours.values(byP50), floor.values(byP50)), microsDist(ours.dist(byP50)), microsDist(floor.dist(byP50)))
		}
	}
	add("One caller p50 (a, default pool): redlimit ÷ floor", fig)
	toFloor, toPeer, grantToPeer := r.interleavedTargets()
	add("One caller, in turns decision by decision (i): p50 ÷ the floor's, run by run", toFloor)
	add("One caller, in turns decision by decision (i): redlimit's p50 ÷ the fastest peer's, run by run", toPeer)
	add("One caller, in turns decision by decision (i): the grant floor's p50 (Redisson's layout, four commands, no logic) ÷ the fastest peer's, run by run", grantToPeer)

	for _, lib := range r.librariesOf("d") {
		fig := missing
		big, ok1 := r.find("d", bigCase(len(bigLimits)-1), lib, 1)
		small, ok2 := r.find("d", bigCase(0), lib, 1)
		if ok1 && ok2 {
			if fig = erred(big, small); fig == "" {
				fig = fmt.Sprintf("%s: %s vs %s", versus(big.values(byP50), small.values(byP50)), microsDist(big.dist(byP50)), microsDist(small.dist(byP50)))
			}
		}
		add(fmt.Sprintf("p50 at 100 000 ÷ p50 at 10 permits (d), 1 caller: %s", lib), fig)
	}

	for _, v := range []string{variantRedis, variantMemory} {
		for _, fw := range frameworks {
			add(fmt.Sprintf("Adapter overhead (e), %s, %s, 1 caller: Δ mean, Δ p50, Δ allocs per request vs the bare framework", fw.name, v),
				r.overhead(fw.name, v))
		}
	}
	add("Framework cost (e), gRPC, "+variantFields+" (no decision), 1 caller: Δ mean, Δ p50, Δ allocs per request vs the bare framework",
		r.overhead("gRPC", variantFields))
	for _, v := range []string{variantObserver, variantRateFunc, variantRefund} {
		for _, fw := range frameworks {
			add(fmt.Sprintf("Option cost (e), %s, %s, 1 caller: Δ mean, Δ p50, Δ allocs per request vs the memory core without it", fw.name, v),
				r.optionCost(fw.name, v))
		}
	}
	return t
}

// afterDecision lists Redis's time per call of redlimit's acquire (per
// decision and per script call, which coalesced acquires share), and of the
// settles and the refund that follow a grant, in scenario s.
func (r *report) afterDecision() string {
	var parts []string
	if x, ok := r.find("s", caseLibrary, libRedlimit, scriptCallers); ok {
		if e := erred(x); e != "" {
			parts = append(parts, "acquire: "+e)
		} else if x.Redis != nil && x.Redis.ScriptCalls > 0 {
			perCall := x.values(func(y row) float64 {
				if y.Redis == nil || y.Redis.ScriptCalls == 0 {
					return math.NaN()
				}
				return y.Redis.Script / y.Redis.ScriptCalls
			})
			parts = append(parts, fmt.Sprintf("acquire **%s µs** per decision (%s µs per script call)",
				x.dist(byScript).format(fixed2), summarize(perCall).format(fixed2)))
		}
	}
	for _, c := range []struct{ lib, what string }{
		{libSettleBelow, "settle 2 → 1 permits"}, {libSettleAbove, "settle 2 → 3 permits"}, {libRefund, "refund"},
	} {
		x, ok := r.find("s", caseLibrary, c.lib, scriptCallers)
		switch {
		case !ok:
		case erred(x) != "":
			parts = append(parts, c.what+": "+erred(x))
		case x.Redis != nil && x.Redis.ScriptCalls > 0:
			parts = append(parts, fmt.Sprintf("%s **%s µs**", c.what, x.dist(byScript).format(fixed2)))
		}
	}
	return orMissing(strings.Join(parts, "; "))
}

// optionCost is the cost of the feature variant v over the memory-core
// variant, at one caller.
func (r *report) optionCost(fw, v string) string {
	base, ok1 := r.find("e", fw, variantMemory, 1)
	with, ok2 := r.find("e", fw, v, 1)
	if !ok1 || !ok2 {
		return "not measured in this run"
	}
	if e := erred(base, with); e != "" {
		return e
	}
	return fmt.Sprintf("%s, %s p50, **%s allocs**", delta(with.values(byMean), base.values(byMean), " µs"),
		delta(with.values(byP50Micros), base.values(byP50Micros), " µs"), signed(with.median(byAllocs)-base.median(byAllocs)))
}

// overhead is the cost of the middleware variant v over the bare framework
// at one caller. On Redis, it also gives the part beyond the core's own
// decision (scenario a, one caller), which includes the round trip.
func (r *report) overhead(fw, v string) string {
	bare, ok1 := r.find("e", fw, variantBare, 1)
	mw, ok2 := r.find("e", fw, v, 1)
	if !ok1 || !ok2 {
		if v == variantMemory && newMemoryRedis == nil {
			return "not measured: package internal/memredis was not present (see memcore.go)"
		}
		return "not measured in this run"
	}
	if e := erred(bare, mw); e != "" {
		return e
	}
	// The parts beyond a core decision subtract medians: a difference of
	// differences, with no test of its own.
	mean := mw.median(byMean) - bare.median(byMean)
	p50 := mw.median(byP50Micros) - bare.median(byP50Micros)
	allocs := mw.median(byAllocs) - bare.median(byAllocs)
	s := fmt.Sprintf("%s, %s, **%s allocs**", delta(mw.values(byMean), bare.values(byMean), " µs"),
		delta(mw.values(byP50Micros), bare.values(byP50Micros), " µs"), signed(allocs))
	if core, ok := r.find("e", coreAlone, variantMemory, 1); ok && v == variantMemory && !core.failed() {
		s += fmt.Sprintf("; the adapter's own part, beyond the core decision alone (%s µs mean, %s µs p50, %s allocs): "+
			"%s µs mean, **%s µs p50**, **%s allocs**",
			fixed(core.median(byMean), 2), fixed(core.median(byP50Micros), 2), fixed(core.median(byAllocs), 1),
			signed(mean-core.median(byMean)), signed(p50-core.median(byP50Micros)), signed(allocs-core.median(byAllocs)))
	}
	if core, ok := r.find("e", coreAlone, variantMemory, 1); ok && v == variantMemory && !core.failed() {
		if fields, ok := r.find("e", fw, variantFields, 1); ok && !fields.failed() {
			// What grpc charges for the fields the interceptor sends.
			fm, fp, fa := fields.median(byMean)-bare.median(byMean), fields.median(byP50Micros)-bare.median(byP50Micros),
				fields.median(byAllocs)-bare.median(byAllocs)
			s += fmt.Sprintf("; beyond the core decision and grpc's cost of the five fields (%s µs mean, %s µs p50, %s allocs): "+
				"%s µs mean, **%s µs p50**, **%s allocs**", signed(fm), signed(fp), signed(fa),
				signed(mean-core.median(byMean)-fm), signed(p50-core.median(byP50Micros)-fp), signed(allocs-core.median(byAllocs)-fa))
		}
	}
	if core, ok := r.find("a", poolDefault, libRedlimit, 1); ok && v == variantRedis && !core.failed() {
		s += fmt.Sprintf("; beyond the core decision (a, 1 caller: %s µs mean, %s allocs): %s µs, %s allocs",
			fixed(core.median(byMean), 1), fixed(core.median(byAllocs), 1), signed(mean-core.median(byMean)), signed(allocs-core.median(byAllocs)))
	}
	return s
}

// callersText is "1 caller" or "n callers".
func callersText(n int) string {
	if n == 1 {
		return "1 caller"
	}
	return strconv.Itoa(n) + " callers"
}

// bigCase is the case name of the i-th limit of scenario d.
func bigCase(i int) string { return count(float64(bigLimits[i])) }

// sorted returns the rows of scenario by case and library, each in order
// of first measurement, then by callers.
func (r *report) sorted(scenario string) []row {
	var out []row
	cases, libs := map[string]int{}, map[string]int{}
	for _, x := range r.Rows {
		if x.Scenario != scenario {
			continue
		}
		if _, ok := cases[x.Case]; !ok {
			cases[x.Case] = len(cases)
		}
		if _, ok := libs[x.Library]; !ok {
			libs[x.Library] = len(libs)
		}
		out = append(out, x)
	}
	slices.SortStableFunc(out, func(a, b row) int {
		return cmp.Or(cmp.Compare(cases[a.Case], cases[b.Case]), cmp.Compare(libs[a.Library], libs[b.Library]),
			cmp.Compare(a.Callers, b.Callers))
	})
	return out
}

// librariesOf returns the libraries measured in scenario, in order.
func (r *report) librariesOf(scenario string) []string {
	var libs []string
	for _, x := range r.Rows {
		if x.Scenario == scenario && !slices.Contains(libs, x.Library) {
			libs = append(libs, x.Library)
		}
	}
	return libs
}

// writeMarkdown writes the whole report.
func (r *report) writeMarkdown(w io.Writer) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "# redlimit benchmarks\n\n%s\n\nTotal run time: %s.\n\n", r.Env, r.Total.Round(time.Second))
	b.WriteString("Client and Redis share this machine's cores: the figures are ratios for this machine, not absolutes. " +
		"See README.md for what each scenario and column means.\n\n")
	b.WriteString(intervalNote(r.Samples) + " In the tables, allocations are the median of the runs, and the other " +
		"columns without an interval (Redis's figures, allowed) those of the point's median run by decisions/s " +
		"(in s, by script time; of an even number of runs, the upper of the middle two).\n\n")

	b.WriteString("## Targets\n\n")
	table(b, []string{"target", "figure"}, r.targets())

	fmt.Fprintf(b, "## Scenario a: %s\n\n", scenarioTitles["a"])
	b.WriteString("go-redis pool: *default* is go-redis's PoolSize, 10 per GOMAXPROCS; *= callers* is a PoolSize " +
		"equal to the number of callers, measured only where the callers outnumber the default pool.\n\n")
	r.decisionTable(b, "a", "go-redis pool")
	for _, id := range []string{"b", "c", "f", "g"} {
		fmt.Fprintf(b, "## Scenario %s: %s\n\n", id, scenarioTitles[id])
		b.WriteString("go-redis's default pool.\n\n")
		r.decisionTable(b, id, "")
	}
	b.WriteString("## Redis commands per redlimit decision (a, b, f, g)\n\n" +
		"Calls of each command per decision at 64 callers, from INFO commandstats: the script call, " +
		"then the commands it ran (none: every decision was answered without Redis).\n\n")
	var mix [][]string
	for _, id := range []string{"a", "b", "f", "g"} {
		for _, x := range r.sorted(id) {
			if slices.Contains(redlimitNames, x.Library) && x.Callers == 64 && (x.Case == "" || x.Case == poolDefault) {
				mix = append(mix, []string{id, x.Library, strconv.Itoa(x.Callers), commandMix(x)})
			}
		}
	}
	table(b, []string{"scenario", "library", "callers", "commands per decision"}, mix)

	b.WriteString("### Redis memory per key (a): after one decision on each of 10 000 keys\n\n")
	var mem [][]string
	for _, m := range r.Memory {
		if m.Scenario == "a" {
			mem = append(mem, []string{m.Library, count(m.Used / float64(m.Units)), count(m.Keys / float64(m.Units))})
		}
	}
	table(b, []string{"library", "bytes per key (used_memory delta)", "bytes per key (MEMORY USAGE)"}, mem)

	fmt.Fprintf(b, "## Scenario d: %s\n\n", scenarioTitles["d"])
	r.decisionTable(b, "d", "permits")
	b.WriteString("### p50 at 100 000 permits ÷ p50 at 10 permits (d)\n\n")
	var ratios [][]string
	for _, lib := range r.librariesOf("d") {
		line := []string{lib}
		for _, n := range callerCounts {
			big, ok1 := r.find("d", bigCase(len(bigLimits)-1), lib, n)
			small, ok2 := r.find("d", bigCase(0), lib, n)
			switch {
			case !ok1 || !ok2:
				line = append(line, "–")
			case erred(big, small) != "":
				line = append(line, "n/a (errors)")
			default:
				line = append(line, plain(versus(big.values(byP50), small.values(byP50))))
			}
		}
		ratios = append(ratios, line)
	}
	table(b, []string{"library", "1 caller", "16 callers", "64 callers"}, ratios)
	b.WriteString("### Redis memory of the full window (d)\n\n")
	mem = nil
	for _, m := range r.Memory {
		if m.Scenario == "d" {
			n := float64(m.Units)
			mem = append(mem, []string{m.Library, count(n), count(m.Used), fixed(m.Used/n, 1),
				count(m.Keys), fixed(m.Keys/n, 1), strconv.Itoa(redissonBytesPerPermit)})
		}
	}
	table(b, []string{"library", "permits in the window", "used_memory delta", "per permit",
		"MEMORY USAGE", "per permit", "Redisson, per permit (published)"}, mem)
	b.WriteString("used_memory also moves with the client connections' buffers (about ±100 kB here), " +
		"so its small deltas are noise; MEMORY USAGE counts the keys alone.\n\n")

	fmt.Fprintf(b, "## Scenario e: %s\n\n", scenarioTitles["e"])
	r.requestTable(b)

	fmt.Fprintf(b, "## Scenario i: %s\n\n", scenarioTitles["i"])
	b.WriteString("One go-redis client (default pool) and one caller. In each round every library makes one decision, " +
		"in a new random order, on the same one of 1 000 keys, each decided once by every library before the runs and " +
		"far below its limit. A run is the rounds of one measured time; a library's p50 and p99 are over its decisions " +
		"in the run, its mean is over their times alone. *÷ the floor's* is the median, over the runs, of the " +
		"library's p50 ÷ the floor's p50 in the same run, with its interval; bold when the interval leaves out 1. " +
		"Redis's figures are not taken: the libraries' commands are mixed (scenario a at one caller has them).\n\n")
	r.interleavedTable(b)

	fmt.Fprintf(b, "## Scenario s: %s\n\n", scenarioTitles["s"])
	b.WriteString("Redis's own script time per decision: usec of EVALSHA in INFO commandstats after CONFIG RESETSTAT, ÷ decisions, " +
		"over 4 096 limiters far below their limits. *return 1* and the *straight-line* script " +
		"(`lua/straightline.lua`: Redisson's layout work for one grant, HMGET, TIME, ZRANGEBYSCORE, INCRBY, PTTL, ZADD, " +
		"no branches) are called directly, in pipelines of 32 EVALSHA from 4 goroutines, on config hashes and counters " +
		"created first: one decision per script call. The others are called through their library from 64 goroutines over " +
		"4 096 keys each decided once before: one decision per call, but for redlimit with coalescing on, whose concurrent " +
		"decisions share script calls (*script calls per decision*); the floor is *return 1* called that way. redlimit's " +
		"settle and refund rows are the calls that follow a decision, on grants of 2 permits taken just before the run " +
		"(their acquires are not counted): `Limiter.Settle` to 1 permit (below the reservation) or 3 (above it), each " +
		"a call of the charge script, and `Limiter.Refund`; a \"decision\" there is one settle or refund. Redis's time " +
		"per call depends on how the calls arrive (compare the two *return 1* rows); *beyond return 1* subtracts the floor " +
		"called the same way.\n\n")
	r.scriptTable(b)

	if len(r.Notes) > 0 {
		b.WriteString("## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(b, "- %s\n", n)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// decisionTable writes the rows of one scenario of decisions, with their
// case in a first column named caseHead unless it is "".
func (r *report) decisionTable(b *strings.Builder, scenario, caseHead string) {
	head := []string{"library", "callers", "decisions/s", "p50", "p99", "allocs/dec", "Redis cmds/dec",
		"round trips/dec", "Redis CPU µs/dec", "Redis cmd time µs/dec", "script µs/dec", "allowed", "errors"}
	if caseHead != "" {
		head = append([]string{caseHead}, head...)
	}
	var lines [][]string
	for _, x := range r.sorted(scenario) {
		line := []string{x.Library, strconv.Itoa(x.Callers)}
		line = append(line, clientCells(x)...)
		line = append(line, redisCells(x)...)
		line = append(line, percent(x.Allowed, x.Decisions), errorCell(x))
		if caseHead != "" {
			line = append([]string{x.Case}, line...)
		}
		lines = append(lines, line)
	}
	table(b, head, lines)
}

// requestTable writes scenario e.
func (r *report) requestTable(b *strings.Builder) {
	head := []string{"framework", "variant", "callers", "requests/s", "p50", "p99", "allocs/req",
		"Redis cmds/req", "round trips/req", "Redis CPU µs/req", "Redis cmd time µs/req", "script µs/req",
		"Δ p50 vs bare", "Δ allocs vs bare", "errors"}
	var lines [][]string
	for _, x := range r.sorted("e") {
		dp50, dallocs := "–", "–"
		if bare, ok := r.find("e", x.Case, variantBare, x.Callers); ok && x.Library != variantBare && erred(x, bare) == "" {
			dp50 = plain(delta(x.values(byP50Micros), bare.values(byP50Micros), " µs"))
			dallocs = signed(x.median(byAllocs) - bare.median(byAllocs))
		}
		line := append([]string{x.Case, x.Library, strconv.Itoa(x.Callers)}, clientCells(x)...)
		line = append(line, redisCells(x)...)
		lines = append(lines, append(line, dp50, dallocs, errorCell(x)))
	}
	table(b, head, lines)
}

// scriptTable writes scenario s.
func (r *report) scriptTable(b *strings.Builder) {
	head := []string{"script", "called", "decisions measured", "script calls per decision", "Redis µs per decision", "beyond return 1, same calling",
		"÷ straight-line", "Redis CPU µs per decision", "errors"}
	straight, okS := r.find("s", casePipelines, scriptStraight, scriptPipeliners)
	var lines [][]string
	for _, x := range r.sorted("s") {
		decisions, calls, per, cpu, beyond, vs := "–", "–", "–", "–", "–", "–"
		if x.Redis != nil && x.Redis.ScriptCalls > 0 {
			decisions, calls, cpu = count(float64(x.Decisions)), fixed(x.Redis.ScriptCalls, 2), fixed(x.Redis.CPU, 2)
			if x.Case == casePipelines {
				decisions, calls = count(x.Redis.ScriptCalls*float64(x.Decisions)), "1.00"
				cpu = fixed(x.Redis.CPU/x.Redis.ScriptCalls, 2)
			}
			per = x.dist(byScript).format(fixed2)
			if one, ok := r.returnOne(x.Case); ok && erred(x, one) == "" {
				beyond = signed2(x.median(byScript) - one.median(byScript))
			}
			if okS && erred(x, straight) == "" && x.Library != scriptStraight {
				vs = plain(versus(x.values(byScript), straight.values(byScript)))
			}
		}
		name := x.Library
		if x.Library == libRedlimit {
			name = "redlimit's acquire"
		}
		lines = append(lines, []string{name, x.Case, decisions, calls, per, beyond, vs, cpu, errorCell(x)})
	}
	table(b, head, lines)
}

// returnOne returns the "return 1" script called as in case cs of
// scenario s: the floor of a script call made that way.
func (r *report) returnOne(cs string) (row, bool) {
	if cs == casePipelines {
		return r.find("s", cs, scriptReturnOne, scriptPipeliners)
	}
	return r.find("s", cs, libFloor, scriptCallers)
}

// commandMix lists the calls of each command per decision of x: script
// calls first, then the most called.
func commandMix(x row) string {
	if x.Redis == nil || x.Decisions == 0 {
		return "–"
	}
	names := slices.Collect(maps.Keys(x.Redis.Mix))
	slices.SortFunc(names, func(a, b string) int {
		if sa, sb := scriptCommands[a], scriptCommands[b]; sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(x.Redis.Mix[b], x.Redis.Mix[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(names))
	for i, n := range names {
		v := x.Redis.Mix[n]
		f := fixed(v, 2)
		if v < 0.01 {
			f = strconv.FormatFloat(v, 'g', 2, 64)
		}
		parts[i] = strings.ToUpper(n) + " " + f
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// clientCells returns decisions/s, p50 and p99 with their intervals, and
// allocations per decision (the median), or dashes where no call
// succeeded.
func clientCells(x row) []string {
	if x.Decisions == 0 {
		return []string{"0", "–", "–", "–"}
	}
	return []string{x.dist(byRate).format(count), microsDist(x.dist(byP50)), microsDist(x.dist(byP99)), fixed(x.median(byAllocs), 1)}
}

// redisCells returns the Redis columns of a row, or dashes. The script
// time is a dash for a library that ran no script.
func redisCells(x row) []string {
	if x.Redis == nil {
		return []string{"–", "–", "–", "–", "–"}
	}
	script := fixed(x.Redis.Script, 1)
	if x.Redis.ScriptCalls == 0 && x.Redis.Commands > 0 {
		script = "–"
	}
	return []string{fixed(x.Redis.Commands, 2), fixed(x.Redis.RoundTrips, 2), fixed(x.Redis.CPU, 1),
		fixed(x.Redis.CmdTime, 1), script}
}

// errorCell is the errors of the reported run, and those of the point's
// other runs.
func errorCell(x row) string {
	s := strconv.FormatInt(x.Errors, 10)
	if x.OtherErrors > 0 {
		s += fmt.Sprintf(" (+%d in other runs)", x.OtherErrors)
	}
	return s
}

// table writes a Markdown table.
func table(b *strings.Builder, head []string, lines [][]string) {
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
	for range head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, l := range lines {
		b.WriteString("| " + strings.Join(l, " | ") + " |\n")
	}
	b.WriteString("\n")
}

// count formats a number rounded to a whole, in groups of three digits.
func count(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	s := strconv.FormatInt(int64(math.Round(math.Abs(v))), 10)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ' ')
		}
		out = append(out, s[i])
	}
	if v < 0 && string(out) != "0" {
		return "-" + string(out)
	}
	return string(out)
}

// microsDist formats a dist of durations in nanoseconds in microseconds:
// "148.4 [140.2, 160.3] µs".
func microsDist(d dist) string {
	return d.scaled(1e-3).format(fixed1) + " µs"
}

// fixed1 and fixed2 format v with one and two decimals.
func fixed1(v float64) string { return fixed(v, 1) }
func fixed2(v float64) string { return fixed(v, 2) }

// plain is s without its bold.
func plain(s string) string { return strings.ReplaceAll(s, "**", "") }

// fixed formats v with prec decimals.
func fixed(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

// signed formats v with one decimal and its sign.
func signed(v float64) string {
	s := fixed(v, 1)
	if !strings.HasPrefix(s, "-") {
		s = "+" + s
	}
	return s
}

// signed2 formats v with two decimals and its sign.
func signed2(v float64) string {
	s := fixed(v, 2)
	if !strings.HasPrefix(s, "-") {
		s = "+" + s
	}
	return s
}

// ratio formats a / b.
func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fixed(a/b, 2) + "×"
}

// percent formats part / whole as a percentage.
func percent(part, whole int64) string {
	if whole == 0 {
		return "–"
	}
	return fixed(100*float64(part)/float64(whole), 1) + "%"
}

func orMissing(s string) string {
	if s == "" {
		return "not measured"
	}
	return s
}
