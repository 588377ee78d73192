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
// its value.
func (r *report) writeSVG(w io.Writer) error {
	var libs []string // present in the chart's rows
	var colors []string
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range chartLibraries {
		for _, g := range chartGroups {
			if x, ok := r.find(g.id, g.cs, l.name, chartCallers); ok && x.rate() > 0 {
				if !slices.Contains(libs, l.name) {
					libs, colors = append(libs, l.name), append(colors, l.color)
				}
				lo, hi = min(lo, x.rate()), max(hi, x.rate())
			}
		}
	}
	if len(libs) == 0 {
		lo, hi = 1, 10
	}
	dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dHi <= dLo {
		dHi = dLo + 1
	}

	const (
		width, height          = 960.0, 540.0
		left, right, top, plot = 80.0, 220.0, 70.0, 380.0 // margins and plot height
	)
	plotW := width - left - right
	groupW := plotW / float64(len(chartGroups))
	barW := (groupW - 30) / float64(max(len(libs), 1))
	y := func(v float64) float64 {
		return top + plot - (math.Log10(v)-dLo)/(dHi-dLo)*plot
	}

	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif">`+"\n",
		width, height, width, height)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text(b, width/2, 28, 18, "middle", "bold", fmt.Sprintf("Decisions per second, %d callers (log scale)", chartCallers))
	text(b, width/2, 50, 12, "middle", "normal", "client and Redis on the same machine: compare ratios, not absolutes")

	for d := dLo; d <= dHi; d++ {
		gy := top + plot - (d-dLo)/(dHi-dLo)*plot
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, gy, left+plotW, gy)
		text(b, left-8, gy+4, 12, "end", "normal", short(math.Pow(10, d)))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top, left, top+plot)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+plot, left+plotW, top+plot)

	for gi, g := range chartGroups {
		gx := left + float64(gi)*groupW + 15
		for li, lib := range libs {
			x, ok := r.find(g.id, g.cs, lib, chartCallers)
			if !ok || x.rate() <= 0 {
				continue
			}
			bx, by := gx+float64(li)*barW, y(x.rate())
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %s decisions/s</title></rect>`+"\n",
				bx+1, by, barW-2, top+plot-by, colors[li], html.EscapeString(lib), g.id, count(x.rate()))
			text(b, bx+barW/2, by-4, 10, "middle", "normal", short(x.rate()))
		}
		text(b, gx+groupW/2-15, top+plot+22, 13, "middle", "bold", g.label)
	}

	for li, lib := range libs {
		ly := top + 10 + float64(li)*22
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="14" height="14" fill="%s"/>`+"\n", left+plotW+20, ly, colors[li])
		text(b, left+plotW+40, ly+12, 12, "start", "normal", lib)
	}
	text(b, left, height-20, 11, "start", "normal", "go-redis's default pool; redlimit (no …) is redlimit with that feature off; the floor is one EVALSHA of \"return 1\" and allows everything.")
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
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
