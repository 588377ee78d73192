package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"golang.org/x/perf/benchmath"
)

// The statistics of every figure, as benchstat computes them: the median
// of the runs with a distribution-free confidence interval (order
// statistics of the sample, no assumption on its distribution), and a
// Mann-Whitney U test between two samples.
const (
	// confidence is the least confidence of an interval. With 10 runs
	// benchmath takes the 2nd and 9th smallest, a 97.9% interval; with
	// fewer than 6 runs no interval reaches 95% and it is ±∞.
	confidence = 0.95
	// alpha is the significance level of a comparison: with fewer than 4
	// runs of each side no difference reaches it.
	alpha = 0.05
)

var thresholds = benchmath.Thresholds{CompareAlpha: alpha}

// dist is the median of one figure over the runs of a point, and its
// confidence interval.
type dist struct {
	Center, Lo, Hi float64
	N              int // runs
}

// summarize returns the median of vs and its confidence interval.
func summarize(vs []float64) dist {
	if len(vs) == 0 {
		return dist{Center: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	}
	s := benchmath.AssumeNothing.Summary(benchmath.NewSample(slices.Clone(vs), &thresholds), confidence)
	return dist{Center: s.Center, Lo: s.Lo, Hi: s.Hi, N: len(vs)}
}

// bounded reports whether d's interval is finite: there were enough runs.
func (d dist) bounded() bool { return !math.IsInf(d.Lo, 0) && !math.IsInf(d.Hi, 0) }

// scaled returns d with its figures multiplied by k (k > 0).
func (d dist) scaled(k float64) dist {
	return dist{Center: d.Center * k, Lo: d.Lo * k, Hi: d.Hi * k, N: d.N}
}

// format writes d with f: "62 500 [61 800, 63 100]", or "62 500 ± ∞"
// when too few runs give no interval.
func (d dist) format(f func(float64) string) string {
	if math.IsNaN(d.Center) {
		return "–"
	}
	if !d.bounded() {
		return f(d.Center) + " ± ∞"
	}
	return f(d.Center) + " [" + f(d.Lo) + ", " + f(d.Hi) + "]"
}

// comparison is the outcome of a U test between two samples.
type comparison struct {
	P           float64
	Significant bool // P < alpha
}

// compare tests whether a and b come from different distributions.
func compare(a, b []float64) comparison {
	if len(a) == 0 || len(b) == 0 {
		return comparison{P: 1}
	}
	c := benchmath.AssumeNothing.Compare(benchmath.NewSample(slices.Clone(a), &thresholds), benchmath.NewSample(slices.Clone(b), &thresholds))
	return comparison{P: c.P, Significant: c.P < c.Alpha}
}

// ratioInterval returns the confidence interval, at least 1-alpha, of the
// ratio of a's distribution to b's, distribution-free, for runs that are
// all positive: the Hodges-Lehmann interval of the runs' pairwise ratios
// a[i]/b[j], whose ends are the k-th smallest and the k-th largest of
// them, k the largest number such that the U statistic of samples from
// one distribution is below k with probability at most alpha/2. So it
// leaves out 1 when the U test of compare tells a from b at alpha (up to
// ties, and to the normal approximation benchmath takes beyond 50 runs a
// side). ok is false when the runs are too few for one, or a run of b is 0.
func ratioInterval(a, b []float64) (lo, hi float64, ok bool) {
	k := uCritical(len(a), len(b), alpha/2)
	if k < 1 {
		return 0, 0, false
	}
	rs := make([]float64, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			if y == 0 {
				return 0, 0, false
			}
			rs = append(rs, x/y)
		}
	}
	slices.Sort(rs)
	return rs[k-1], rs[len(rs)-k], true
}

// uCritical returns the largest k such that the U statistic of samples of
// n and m runs drawn from one distribution is below k with probability at
// most p: the exact null distribution, counted over the orders of the n+m
// runs. It returns 0 when even U = 0 is more likely than p.
func uCritical(n, m int, p float64) int {
	if n == 0 || m == 0 {
		return 0
	}
	// ways[i][j][u]: orders of i and j runs with U = u, built up one run
	// at a time (the largest run comes from one side or the other).
	ways := make([][][]float64, n+1)
	for i := range ways {
		ways[i] = make([][]float64, m+1)
		for j := range ways[i] {
			ways[i][j] = make([]float64, i*j+1)
			if i == 0 || j == 0 {
				ways[i][j][0] = 1
				continue
			}
			for u := range ways[i][j] {
				if u >= j {
					ways[i][j][u] += ways[i-1][j][u-j]
				}
				if u < len(ways[i][j-1]) {
					ways[i][j][u] += ways[i][j-1][u]
				}
			}
		}
	}
	total := 0.0
	for _, w := range ways[n][m] {
		total += w
	}
	below := 0.0 // orders with U < k
	k := 0
	for ; k < len(ways[n][m]); k++ {
		if (below+ways[n][m][k])/total > p {
			break
		}
		below += ways[n][m][k]
	}
	return k
}

// pValue formats a p-value as benchstat does.
func (c comparison) pValue() string { return fmt.Sprintf("p=%.3f", c.P) }

// versus formats the ratio of the medians of a and b with the interval of
// the ratio (see ratioInterval), bold when the two samples differ
// significantly, else "~" followed by the ratio and the p-value: benchstat
// prints "~" for a difference it cannot tell from noise.
func versus(a, b []float64) string {
	r := ratio(summarize(a).Center, summarize(b).Center)
	iv := ""
	if lo, hi, ok := ratioInterval(a, b); ok {
		iv = " [" + fixed(lo, 2) + ", " + fixed(hi, 2) + "]"
	}
	c := compare(a, b)
	if !c.Significant {
		return "~ (" + r + iv + ", " + c.pValue() + ")"
	}
	return "**" + r + "**" + iv + " (" + c.pValue() + ")"
}

// delta formats the difference of the medians of a and b with unit,
// signed, or "~" and the difference when the samples do not differ
// significantly.
func delta(a, b []float64, unit string) string {
	d := signed(summarize(a).Center-summarize(b).Center) + unit
	if c := compare(a, b); !c.Significant {
		return "~ (" + d + ", " + c.pValue() + ")"
	}
	return "**" + d + "**"
}

// metric is one figure of a run.
type metric func(row) float64

// The metrics with intervals.
var (
	byRate metric = row.rate
	byP50  metric = func(x row) float64 { return float64(x.P50) }
	byP99  metric = func(x row) float64 { return float64(x.P99) }
	// byP50Micros is p50 in microseconds, for differences.
	byP50Micros metric = func(x row) float64 { return float64(x.P50) / 1e3 }
	byP99Micros metric = func(x row) float64 { return float64(x.P99) / 1e3 }
	byAllocs    metric = func(x row) float64 { return x.Allocs }
	// byScript is Redis's script time per decision, in scenario s per
	// script call of the pipelined variants.
	byScript metric = row.perScriptDecision
	// byScriptTime is the time of the script calls per decision, as
	// the tables of scenarios a to g show it.
	byScriptTime metric = func(x row) float64 {
		if x.Redis == nil {
			return math.NaN()
		}
		return x.Redis.Script
	}
	// byCapacity is the decisions per second one Redis core could serve:
	// 1e6 ÷ Redis CPU µs per decision.
	byCapacity metric = func(x row) float64 {
		if x.Redis == nil || x.Redis.CPU <= 0 {
			return math.NaN()
		}
		return 1e6 / x.Redis.CPU
	}
	// byMean is the mean time per decision of one caller, in
	// microseconds: 1 / throughput.
	byMean metric = func(x row) float64 { return 1e6 / x.rate() }
)

// values returns m of each run of x, leaving out runs without it (NaN):
// the row itself when it holds no runs.
func (x row) values(m metric) []float64 {
	runs := x.Runs
	if len(runs) == 0 {
		runs = []sample{x.sample}
	}
	out := make([]float64, 0, len(runs))
	for _, s := range runs {
		y := x
		y.sample = s
		if v := m(y); !math.IsNaN(v) {
			out = append(out, v)
		}
	}
	return out
}

// dist returns the median of m over the runs of x, and its interval.
func (x row) dist(m metric) dist { return summarize(x.values(m)) }

// median returns the median of m over the runs of x.
func (x row) median(m metric) float64 { return x.dist(m).Center }

// intervalNote says how intervals and comparisons read, for a report.
func intervalNote(runs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Each figure is the median of %d runs with its confidence interval in brackets "+
		"(at least %.0f%%, distribution-free: order statistics of the runs, as benchstat computes it; "+
		"\"± ∞\" when the runs are too few for one). A ratio or difference between two samples is in bold when "+
		"a Mann-Whitney U test tells them apart at α = %.2f (its p-value follows), and \"~\" when it does not: "+
		"then the two are not different at this level of noise, whatever their medians say. A ratio's interval, in brackets "+
		"after it, is that of the runs' pairwise ratios (Hodges-Lehmann, at least %.0f%%): it leaves out 1 when the U test tells the two apart.",
		runs, confidence*100, alpha, confidence*100)
	return b.String()
}
