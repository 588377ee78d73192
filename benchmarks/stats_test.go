package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	// Ten runs: the median is the mean of the 5th and 6th, and the 95%
	// interval runs from the 2nd to the 9th smallest (a 97.9% one).
	d := summarize([]float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5})
	if d.Center != 5.5 || d.Lo != 2 || d.Hi != 9 || d.N != 10 {
		t.Errorf("summarize(1..10) = %+v, want center 5.5 in [2, 9] over 10 runs", d)
	}
	if got, want := d.format(fixed1), "5.5 [2.0, 9.0]"; got != want {
		t.Errorf("format = %q, want %q", got, want)
	}
	// Six runs are the fewest with a 95% interval: the extremes.
	if d := summarize([]float64{6, 5, 4, 3, 2, 1}); d.Lo != 1 || d.Hi != 6 || !d.bounded() {
		t.Errorf("summarize(1..6) = %+v, want the interval [1, 6]", d)
	}
	// Five give none.
	d = summarize([]float64{62_500, 61_000, 63_000, 62_000, 64_000})
	if d.bounded() || d.Center != 62_500 {
		t.Errorf("summarize(5 runs) = %+v, want the median 62 500 and no interval", d)
	}
	if got, want := d.format(count), "62 500 ± ∞"; got != want {
		t.Errorf("format = %q, want %q", got, want)
	}
	if got := summarize(nil).format(count); got != "–" {
		t.Errorf("summarize(nil).format = %q, want –", got)
	}
	// The input is not reordered: the runs keep the order they were taken in.
	vs := []float64{3, 1, 2}
	summarize(vs)
	if vs[0] != 3 || vs[1] != 1 {
		t.Errorf("summarize sorted its input: %v", vs)
	}
}

func TestCompare(t *testing.T) {
	a := []float64{100, 101, 102, 103, 104, 105, 106, 107, 108, 109}
	b := []float64{110, 111, 112, 113, 114, 115, 116, 117, 118, 119}
	if c := compare(a, b); !c.Significant || c.P >= alpha {
		t.Errorf("compare(disjoint) = %+v, want significant", c)
	}
	// Interleaved samples cannot be told apart.
	c := []float64{100, 102, 104, 106, 108, 110, 112, 114, 116, 118}
	d := []float64{101, 103, 105, 107, 109, 111, 113, 115, 117, 119}
	if cmp := compare(c, d); cmp.Significant {
		t.Errorf("compare(interleaved) = %+v, want not significant", cmp)
	}
	// Three runs a side can never differ at 0.05 (the least p is 0.1).
	if cmp := compare([]float64{1, 2, 3}, []float64{10, 20, 30}); cmp.Significant {
		t.Errorf("compare(3 vs 3 runs) = %+v, want not significant", cmp)
	}
	if cmp := compare(nil, a); cmp.Significant || cmp.P != 1 {
		t.Errorf("compare(nil, a) = %+v, want p = 1", cmp)
	}

	for _, tc := range []struct{ got, want string }{
		{versus(b, a), "**1.10×** [1.07, 1.13] (p=0.000)"},
		{versus(d, c), "~ (1.01× [0.95, 1.07], p=0.739)"},
		{delta(b, a, " µs"), "**+10.0 µs**"},
		{delta(d, c, " µs"), "~ (+1.0 µs, p=0.739)"},
		{plain(versus(b, a)), "1.10× [1.07, 1.13] (p=0.000)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestRatioInterval(t *testing.T) {
	// The textbook critical values of a two-sided U test at 0.05: U at
	// most 23 for 10 runs a side, 2 for 5, and none for 3.
	for _, tc := range []struct{ n, m, want int }{{10, 10, 24}, {5, 5, 3}, {3, 3, 0}, {6, 10, 12}} {
		if got := uCritical(tc.n, tc.m, 0.025); got != tc.want {
			t.Errorf("uCritical(%d, %d) = %d, want %d", tc.n, tc.m, got, tc.want)
		}
	}
	// Runs that differ by a constant factor have that ratio, exactly.
	a := []float64{100, 101, 102, 103, 104, 105, 106, 107, 108, 109}
	twice := make([]float64, len(a))
	for i, v := range a {
		twice[i] = 2 * v
	}
	if lo, hi, ok := ratioInterval(twice, a); !ok || lo >= 2 || hi <= 2 {
		t.Errorf("ratioInterval(2a, a) = [%v, %v] %v, want around 2", lo, hi, ok)
	}
	if _, _, ok := ratioInterval([]float64{1, 2, 3}, []float64{4, 5, 6}); ok {
		t.Error("ratioInterval of 3 runs a side has an interval; none reaches 95%")
	}
	// The interval leaves out 1 exactly when the U test tells the samples
	// apart, over samples that overlap more and more.
	for shift := 0.0; shift <= 12; shift++ {
		b := make([]float64, len(a))
		for i, v := range a {
			b[i] = v + shift + 0.5 // no ties
		}
		lo, hi, ok := ratioInterval(b, a)
		if !ok {
			t.Fatal("no interval for 10 runs a side")
		}
		if apart, sig := lo > 1 || hi < 1, compare(b, a).Significant; apart != sig {
			t.Errorf("shift %v: interval [%.4f, %.4f] leaves out 1: %v; U test significant: %v", shift, lo, hi, apart, sig)
		}
	}
}

func TestRowValues(t *testing.T) {
	x := row{sample: sample{Decisions: 5, Elapsed: time.Second, P50: time.Millisecond}}
	// A row measured once is its own only run.
	if got := x.values(byRate); len(got) != 1 || got[0] != 5 {
		t.Errorf("values of a row without runs = %v, want [5]", got)
	}
	x.Runs = []sample{
		{Decisions: 10, Elapsed: time.Second, P50: 2 * time.Millisecond},
		{Decisions: 30, Elapsed: 2 * time.Second, P50: 4 * time.Millisecond},
	}
	if got := x.values(byRate); len(got) != 2 || got[0] != 10 || got[1] != 15 {
		t.Errorf("values(byRate) = %v, want [10 15]", got)
	}
	if got := x.median(byP50Micros); got != 3000 {
		t.Errorf("median(byP50Micros) = %v, want 3000", got)
	}
	// Runs without the figure are left out.
	if got := x.values(byCapacity); len(got) != 0 {
		t.Errorf("values(byCapacity) without Redis figures = %v, want none", got)
	}
	if d := x.dist(byCapacity); !math.IsNaN(d.Center) {
		t.Errorf("dist(byCapacity) = %+v, want NaN", d)
	}
}

func TestIntervalNote(t *testing.T) {
	n := intervalNote(10)
	for _, want := range []string{"median of 10 runs", "95%", "Mann-Whitney U", "α = 0.05", "\"~\""} {
		if !strings.Contains(n, want) {
			t.Errorf("intervalNote lacks %q: %s", want, n)
		}
	}
}
