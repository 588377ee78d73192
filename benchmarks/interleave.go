package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// interleavedKeys is the number of keys each library decides on in
// scenario i, each decided once before the runs.
const interleavedKeys = 1_000

// runI measures scenario i: one caller, the libraries taking turns decision
// by decision (in a new random order each round), on one go-redis client
// with the default pool, each on keys far below their limit. A drift in the
// machine's load falls on every library alike within a round, so the
// ratio of two libraries' p50s in one run is steadier than the ratio of
// their medians over separate runs. Each run gives each library's p50 and
// p99 over its decisions, and its mean time per decision; Redis's figures
// are left out, as the libraries' commands are mixed.
func (h *harness) runI(ctx context.Context) ([]row, error) {
	libs := []library{redlimitLib, redisRateLib, ululeLib, httprateLib, grantFloorLib, floorLib}
	rdb, _ := h.client(defaultPoolSize())
	defer rdb.Close()
	if err := h.flush(ctx); err != nil {
		return nil, err
	}
	cs := make([]Contender, len(libs))
	for i, lib := range libs {
		c, err := lib.new(rdb, allowedLimit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", lib.name, err)
		}
		if err := touch(ctx, c, keys[:interleavedKeys]); err != nil {
			return nil, fmt.Errorf("%s: %w", lib.name, err)
		}
		cs[i] = c
	}
	runs := make([][]sample, len(libs))
	for range h.samples {
		interleave(ctx, cs, h.warmup, nil)
		for i, s := range interleave(ctx, cs, h.duration, make([][]time.Duration, len(cs))) {
			runs[i] = append(runs[i], s)
		}
	}
	rows := make([]row, len(libs))
	for i, lib := range libs {
		each := make([]row, len(runs[i]))
		for j, s := range runs[i] {
			each[j] = row{Scenario: "i", Library: lib.name, Callers: 1, sample: s}
		}
		x := medianRun(each)
		x.Runs = runs[i]
		for _, s := range runs[i] {
			x.OtherErrors += s.Errors
		}
		x.OtherErrors -= x.Errors
		rows[i] = x
		logRow(x)
	}
	return rows, nil
}

// interleave makes rounds of one decision per contender, in a random order
// each round, for d. With lat non-nil it returns each contender's sample:
// its decisions, errors, p50 and p99, and as Elapsed the sum of its
// decisions' times, so that its rate is one over its mean.
func interleave(ctx context.Context, cs []Contender, d time.Duration, lat [][]time.Duration) []sample {
	out := make([]sample, len(cs))
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	for end, k := time.Now().Add(d), 0; time.Now().Before(end); k++ {
		rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		key := keys[k%interleavedKeys]
		for _, i := range order {
			t := time.Now()
			allowed, err := cs[i].Decide(ctx, key)
			took := time.Since(t)
			switch {
			case err != nil:
				out[i].Errors++ // not a decision
			case lat != nil:
				lat[i] = append(lat[i], took)
				out[i].Decisions++
				out[i].Elapsed += took
				if allowed {
					out[i].Allowed++
				}
			}
		}
	}
	for i, l := range lat {
		if len(l) > 0 {
			slices.Sort(l)
			out[i].P50, out[i].P99 = l[len(l)/2], l[len(l)*99/100]
		}
	}
	return out
}

// paired returns, for each run of a, its p50 ÷ the p50 of b's run taken
// in the same rounds (scenario i), leaving out runs that have no pair.
func paired(a, b row) []float64 {
	var out []float64
	for j := range min(len(a.Runs), len(b.Runs)) {
		if a.Runs[j].P50 > 0 && b.Runs[j].P50 > 0 {
			out = append(out, float64(a.Runs[j].P50)/float64(b.Runs[j].P50))
		}
	}
	return out
}

// pairedRatio formats the median of paired ratios with its interval: bold
// when the interval leaves out 1, else "~".
func pairedRatio(rs []float64) string {
	d := summarize(rs)
	if !d.bounded() {
		return "~ (" + ratio(d.Center, 1) + ")"
	}
	iv := " [" + fixed(d.Lo, 2) + ", " + fixed(d.Hi, 2) + "]"
	if d.Lo > 1 || d.Hi < 1 {
		return "**" + ratio(d.Center, 1) + "**" + iv
	}
	return "~ (" + ratio(d.Center, 1) + iv + ")"
}

// interleavedTargets returns scenario i's figures: each library's p50 ÷
// the floor's, and redlimit's and the grant floor's ÷ the fastest peer's
// (the lowest p50), each paired run by run.
func (r *report) interleavedTargets() (toFloor, toPeer, grantToPeer string) {
	floor, ok := r.find("i", "", libFloor, 1)
	if !ok {
		return "not measured", "not measured", "not measured"
	}
	var parts []string
	var fastest row
	for _, lib := range slices.Concat([]string{libRedlimit}, peerNames) {
		x, ok := r.find("i", "", lib, 1)
		if !ok {
			continue
		}
		if e := erred(x, floor); e != "" {
			parts = append(parts, lib+": "+e)
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s)", lib, pairedRatio(paired(x, floor)), microsDist(x.dist(byP50))))
		if lib != libRedlimit && (fastest.Library == "" || x.median(byP50) < fastest.median(byP50)) {
			fastest = x
		}
	}
	toFloor = orMissing(strings.Join(parts, "; ") + fmt.Sprintf("; the floor %s", microsDist(floor.dist(byP50))))
	toPeer = r.toFastest(libRedlimit, fastest)
	grantToPeer = r.toFastest(libGrantFloor, fastest)
	return toFloor, toPeer, grantToPeer
}

// toFastest returns lib's p50 ÷ the fastest peer's in scenario i, paired
// run by run.
func (r *report) toFastest(lib string, fastest row) string {
	x, ok := r.find("i", "", lib, 1)
	switch {
	case !ok || fastest.Library == "":
		return "not measured"
	case erred(x, fastest) != "":
		return erred(x, fastest)
	}
	return fmt.Sprintf("%s (%s)", pairedRatio(paired(x, fastest)), fastest.Library)
}

// interleavedTable writes scenario i.
func (r *report) interleavedTable(b *strings.Builder) {
	floor, hasFloor := r.find("i", "", libFloor, 1)
	var lines [][]string
	for _, x := range r.sorted("i") {
		toFloor := "–"
		if hasFloor && x.Library != libFloor && erred(x, floor) == "" {
			toFloor = plain(pairedRatio(paired(x, floor)))
		}
		lines = append(lines, []string{x.Library, microsDist(x.dist(byP50)), microsDist(x.dist(byP99)),
			x.dist(byMean).format(fixed1) + " µs", toFloor, count(float64(x.Decisions)), errorCell(x)})
	}
	table(b, []string{"library", "p50", "p99", "mean", "p50 ÷ the floor's, run by run", "decisions (median run)", "errors"}, lines)
}
