package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// chartCallers is the number of callers the chart shows.
const chartCallers = 64

// chartGroup is one scenario and case of the chart.
type chartGroup struct{ id, cs, label string }

// chartGroups are the scenarios of the chart, all with go-redis's default
// pool.
var chartGroups = []chartGroup{
	{"a", poolDefault, "a: allowed path"},
	{"b", "", "b: denied hot key"},
	{"c", "", "c: mixed 80/20"},
}

// chartLibraries are the libraries of the chart, in order, with their colors.
var chartLibraries = []struct{ name, color string }{
	{libRedlimit, "#d62728"},
	{libRedlimitNoCoalesce, "#ff7f0e"},
	{libRedlimitNoCache, "#ff9896"},
	{libRedisRate, "#1f77b4"},
	{libUlule, "#2ca02c"},
	{libHTTPRate, "#9467bd"},
	{libFloor, "#7f7f7f"},
}

// writeSVG draws decisions per second of each library in scenarios a, b
// and c at 64 callers: grouped bars on a log scale, each bar labelled with
// its median and its confidence interval drawn as a whisker.
func (r *report) writeSVG(w io.Writer) error {
	c := barChart{
		title:    fmt.Sprintf("Decisions per second, %d callers (log scale)", chartCallers),
		subtitle: "client and Redis on the same machine: compare ratios, not absolutes; whiskers: confidence interval of the median",
		footnote: "go-redis's default pool; redlimit (no …) is redlimit with that feature off; the floor is one EVALSHA of \"return 1\" and allows everything.",
		unit:     "decisions/s",
		log:      true,
	}
	for _, g := range chartGroups {
		c.groups = append(c.groups, g.label)
	}
	for _, l := range chartLibraries {
		c.series = append(c.series, chartSeries{l.name, l.color})
	}
	c.value = func(gi, si int) (dist, bool) {
		g := chartGroups[gi]
		x, ok := r.find(g.id, g.cs, chartLibraries[si].name, chartCallers)
		if !ok {
			return dist{}, false
		}
		d := x.dist(byRate)
		return d, d.Center > 0
	}
	return c.write(w)
}

// barChart is a chart of grouped bars, one series per color, each bar with
// the interval of its figure as a whisker.
type barChart struct {
	title, subtitle, footnote string // the footnote's lines separated by "\n"
	unit                      string // of the figures, in each bar's tooltip
	groups                    []string
	series                    []chartSeries
	value                     func(group, series int) (dist, bool) // the figure, if measured
	log                       bool                                 // a log scale; else linear from 0
}

// chartSeries is one series of a barChart.
type chartSeries struct{ name, color string }

// write draws c as SVG. Series measured in no group are left out.
func (c barChart) write(w io.Writer) error {
	var series []int                        // present in the chart
	inGroup := make([][]int, len(c.groups)) // present in each group
	widest := 1                             // the most bars in a group
	lo, hi := math.Inf(1), math.Inf(-1)
	for si := range c.series {
		for gi := range c.groups {
			d, ok := c.value(gi, si)
			if !ok || !(d.Center > 0) {
				continue
			}
			if !slices.Contains(series, si) {
				series = append(series, si)
			}
			inGroup[gi] = append(inGroup[gi], si)
			widest = max(widest, len(inGroup[gi]))
			lo, hi = min(lo, d.Center), max(hi, d.Center)
			if d.bounded() {
				lo, hi = min(lo, d.Lo), max(hi, d.Hi)
			}
		}
	}
	if len(series) == 0 {
		lo, hi = 1, 10
	}
	var scale func(v float64) float64 // 0 at the axis, 1 at the top
	var ticks []float64
	if c.log {
		lo = max(lo, 1)
		dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if dHi <= dLo {
			dHi = dLo + 1
		}
		scale = func(v float64) float64 { return (math.Log10(max(v, math.Pow(10, dLo))) - dLo) / (dHi - dLo) }
		for d := dLo; d <= dHi; d++ {
			ticks = append(ticks, math.Pow(10, d))
		}
	} else {
		step := niceStep(hi / 5)
		top := math.Ceil(hi/step) * step
		scale = func(v float64) float64 { return max(v, 0) / top }
		for v := 0.0; v <= top+step/2; v += step {
			ticks = append(ticks, v)
		}
	}

	const (
		width, height          = 960.0, 540.0
		left, right, top, plot = 80.0, 240.0, 70.0, 380.0 // margins and plot height
	)
	plotW := width - left - right
	groupW := plotW / float64(max(len(c.groups), 1))
	barW := (groupW - 30) / float64(widest)
	y := func(v float64) float64 { return top + plot - scale(v)*plot }

	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif">`+"\n",
		width, height, width, height)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text(b, width/2, 28, 18, "middle", "bold", c.title)
	text(b, width/2, 50, 12, "middle", "normal", c.subtitle)

	for _, t := range ticks {
		gy := y(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, gy, left+plotW, gy)
		text(b, left-8, gy+4, 12, "end", "normal", short(t))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top, left, top+plot)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+plot, left+plotW, top+plot)

	for gi, g := range c.groups {
		// The group's bars side by side, centred in it.
		gx := left + float64(gi)*groupW + 15 + float64(widest-len(inGroup[gi]))*barW/2
		for li, si := range inGroup[gi] {
			d, _ := c.value(gi, si)
			s := c.series[si]
			bx, by := gx+float64(li)*barW, y(d.Center)
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %s %s</title></rect>`+"\n",
				bx+1, by, barW-2, top+plot-by, s.color, html.EscapeString(s.name), html.EscapeString(g),
				html.EscapeString(d.format(count)), html.EscapeString(c.unit))
			labelY := by
			if d.bounded() {
				cx, yl, yh := bx+barW/2, y(d.Lo), y(d.Hi)
				fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f" stroke="#222" fill="none"/>`+"\n",
					cx, yl, yh, cx-3, yl, cx+3, cx-3, yh, cx+3)
				labelY = min(labelY, yh)
			}
			text(b, bx+barW/2, labelY-4, 10, "middle", "normal", short(d.Center))
		}
		text(b, left+(float64(gi)+0.5)*groupW, top+plot+22, 13, "middle", "bold", g)
	}

	for li, si := range series {
		ly := top + 10 + float64(li)*22
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="14" height="14" fill="%s"/>`+"\n", left+plotW+20, ly, c.series[si].color)
		text(b, left+plotW+40, ly+12, 12, "start", "normal", c.series[si].name)
	}
	notes := strings.Split(c.footnote, "\n")
	for i, n := range notes {
		text(b, left, height-20-14*float64(len(notes)-1-i), 11, "start", "normal", n)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceStep returns 1, 2 or 5 times a power of ten, at least v.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// text writes one escaped SVG text element.
func text(b *strings.Builder, x, y, size float64, anchor, weight, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="%.0f" text-anchor="%s" font-weight="%s">%s</text>`+"\n",
		x, y, size, anchor, weight, html.EscapeString(s))
}

// short formats a rate briefly: 950, 12.3k, 4.5M.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return trim(v/1e6) + "M"
	case v >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

// trim formats v with up to three significant digits.
func trim(v float64) string {
	s := fixed(v, 2)
	if v >= 10 {
		s = fixed(v, 1)
	}
	if v >= 100 {
		s = fixed(v, 0)
	}
	if strings.Contains(s, ".") {
		s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	}
	return s
}
