package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"

	"github.com/redlimit/redlimit/observe"
)

// counts are the answers to some requests.
type counts struct{ sent, served, denied, other int }

// add counts x.
func (c *counts) add(x sample) {
	c.sent++
	switch x.status {
	case 200:
		c.served++
	case 429:
		c.denied++
	default:
		c.other++
	}
}

// share returns n as a share of the requests sent, or NaN when none were.
func (c counts) share(n int) float64 {
	if c.sent == 0 {
		return math.NaN()
	}
	return float64(n) / float64(c.sent)
}

// count returns the answers to the requests of policy p, abusive or not,
// sent in [from, to).
func (r *run) count(p int, abusive bool, from, to time.Duration) counts {
	var c counts
	for _, x := range r.samples {
		if x.policy == p && x.abusive == abusive && x.at >= from && x.at < to {
			c.add(x)
		}
	}
	return c
}

// buckets returns the number of time buckets.
func (r *run) buckets() int {
	return int((r.cfg.duration + r.cfg.bucket - 1) / r.cfg.bucket)
}

// series returns, per bucket, the share of policy p's abusive requests
// denied (abusive) or of its well-behaved requests served, among those sent
// in the bucket, or, with a span longer than a bucket, among those sent in
// the span that ends with the bucket.
func (r *run) series(p int, abusive bool, span time.Duration) []float64 {
	s := make([]float64, r.buckets())
	for i := range s {
		to := time.Duration(i+1) * r.cfg.bucket
		c := r.count(p, abusive, to-max(span, r.cfg.bucket), to)
		if abusive {
			s[i] = c.share(c.denied)
		} else {
			s[i] = c.share(c.served)
		}
	}
	return s
}

// decidedByRedis reports whether Redis made a decision with this outcome.
func decidedByRedis(o observe.Outcome) bool {
	switch o {
	case observe.Allowed, observe.Denied, observe.WaitedAllowed, observe.DryRunDenied:
		return true
	}
	return false
}

// recovery returns how long after Redis was answering again policy p's
// first decision by Redis came, or false if none did.
func (r *run) recovery(p int) (time.Duration, bool) {
	first := time.Duration(-1)
	for _, e := range r.events {
		if e.policy == p && !e.fallback && e.at >= r.upAt && decidedByRedis(e.outcome) && (first < 0 || e.at < first) {
			first = e.at
		}
	}
	return first - r.upAt, first >= 0
}

// fallbackSpans returns when policy p's local fallback started and stopped
// deciding, in order.
func (r *run) fallbackSpans(p int) []string {
	var s []string
	for _, e := range r.events {
		if e.policy == p && e.fallback {
			what := "off"
			if e.active {
				what = "on"
			}
			s = append(s, fmt.Sprintf("%s at %.2f s", what, e.at.Seconds()))
		}
	}
	return s
}

// outcomes counts policy p's decisions by outcome, in [from, to).
func (r *run) outcomes(p int, from, to time.Duration) map[observe.Outcome]int {
	m := map[observe.Outcome]int{}
	for _, e := range r.events {
		if e.policy == p && !e.fallback && e.at >= from && e.at < to {
			m[e.outcome]++
		}
	}
	return m
}

// slowest returns the longest time a request of policy p took.
func (r *run) slowest(p int) time.Duration {
	var d time.Duration
	for _, x := range r.samples {
		if x.policy == p {
			d = max(d, x.latency)
		}
	}
	return d
}

// pct formats a share as a percentage.
func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// per names an interval after "per": "second", or "2s".
func per(d time.Duration) string {
	switch d {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	}
	return d.String()
}

// rates returns the abusive client's requests per second, the number of
// well-behaved clients, and the requests per second of each.
func rates() (abuser float64, good int, each float64) {
	for _, c := range clients {
		if c.abusive {
			abuser = float64(time.Second) / float64(c.every)
		} else {
			good++
			each = float64(time.Second) / float64(c.every)
		}
	}
	return abuser, good, each
}

// writeMarkdown writes the run's summary and its buckets.
func (r *run) writeMarkdown(w io.Writer) {
	cfg := r.cfg
	abuser, good, each := rates()
	fmt.Fprintf(w, "# A Redis outage: fail open against fail local\n\n")
	fmt.Fprintf(w, "Observed on one run of `cd benchmarks && go run ./outage` (%v, Redis down from %v for %v, %v buckets): %s.\n\n",
		cfg.duration, cfg.downAt, cfg.downFor, cfg.bucket, r.env)
	fmt.Fprintf(w, "Two net/http middlewares (`nethttprl`), one per failure policy, run at the same time on one redis-server, "+
		"each limiting every client to %d requests per %s (keyed by an `X-Client` header) "+
		"in front of its own clients, over HTTP on loopback: one abusive client sending %.0f requests per second, "+
		"and %d well-behaved clients sending %.0f each. The redis-server is killed (SIGKILL) at %.2f s and restarted, "+
		"empty, at %.2f s (when it answers again). Each request is counted in the bucket in which it was sent.\n\n",
		limit.Permits, per(limit.Interval), abuser, good, each, r.downAt.Seconds(), r.upAt.Seconds())

	before := [2]time.Duration{0, r.downAt}
	during := [2]time.Duration{r.downAt, r.upAt}
	after := [2]time.Duration{r.upAt, cfg.duration}
	allowed := int64(math.Round((r.upAt - r.downAt).Seconds() * float64(limit.Permits) / limit.Interval.Seconds()))

	fmt.Fprintf(w, "| |")
	for _, p := range policies {
		fmt.Fprintf(w, " %s |", p.name)
	}
	fmt.Fprintf(w, "\n|---|")
	for range policies {
		fmt.Fprintf(w, "---|")
	}
	row := func(label string, f func(p int) string) {
		fmt.Fprintf(w, "\n| %s |", label)
		for p := range policies {
			fmt.Fprintf(w, " %s |", f(p))
		}
	}
	denied := func(span [2]time.Duration) func(int) string {
		return func(p int) string {
			c := r.count(p, true, span[0], span[1])
			return fmt.Sprintf("%s (%d of %d)", pct(c.share(c.denied)), c.denied, c.sent)
		}
	}
	row("abusive client: denied before the outage", denied(before))
	row("abusive client: denied while Redis was down", denied(during))
	row(fmt.Sprintf("abusive client: served while Redis was down (the limit allows %d)", allowed), func(p int) string {
		return fmt.Sprint(r.count(p, true, during[0], during[1]).served)
	})
	row("abusive client: denied after Redis came back", denied(after))
	row("well-behaved clients: served, whole run", func(p int) string {
		c := r.count(p, false, 0, cfg.duration)
		return fmt.Sprintf("%s (%d of %d)", pct(c.share(c.served)), c.served, c.sent)
	})
	row("well-behaved clients: served while Redis was down", func(p int) string {
		c := r.count(p, false, during[0], during[1])
		return fmt.Sprintf("%s (%d of %d)", pct(c.share(c.served)), c.served, c.sent)
	})
	row("requests with no 200 or 429 (errors)", func(p int) string {
		return fmt.Sprint(r.count(p, true, 0, cfg.duration).other + r.count(p, false, 0, cfg.duration).other)
	})
	row("first decision by Redis after it answered again", func(p int) string {
		d, ok := r.recovery(p)
		if !ok {
			return "none"
		}
		return fmt.Sprintf("%d ms later", d.Milliseconds())
	})
	row("local fallback", func(p int) string {
		if s := r.fallbackSpans(p); len(s) > 0 {
			return strings.Join(s, ", ")
		}
		return "–"
	})
	row("slowest request", func(p int) string { return fmt.Sprintf("%.1f ms", float64(r.slowest(p).Microseconds())/1000) })
	row("decisions while Redis was down, by outcome (the metrics' `outcome` label)", func(p int) string {
		m := r.outcomes(p, during[0], during[1])
		var parts []string
		for o := observe.Outcome(0); o.String() != "unknown"; o++ { // every outcome, in order
			if m[o] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", o, m[o]))
			}
		}
		return strings.Join(parts, ", ")
	})
	fmt.Fprintf(w, "\n\n")

	fmt.Fprintf(w, "## Per %v\n\n", cfg.bucket)
	fmt.Fprintf(w, "| sent at | Redis |")
	for _, p := range policies {
		fmt.Fprintf(w, " %s: abusive denied | %s: well-behaved served |", p.name, p.name)
	}
	fmt.Fprintf(w, "\n|---|---|")
	for range policies {
		fmt.Fprintf(w, "---|---|")
	}
	var abusive, served [][]float64
	for p := range policies {
		abusive, served = append(abusive, r.series(p, true, 0)), append(served, r.series(p, false, 0))
	}
	for i := range r.buckets() {
		from := time.Duration(i) * cfg.bucket
		state := "up"
		switch {
		case from+cfg.bucket <= r.downAt || from >= r.upAt:
		case from >= r.downAt && from+cfg.bucket <= r.upAt:
			state = "down"
		default:
			state = "up/down"
		}
		fmt.Fprintf(w, "\n| %.2f s | %s |", from.Seconds(), state)
		for p := range policies {
			fmt.Fprintf(w, " %s | %s |", pct(abusive[p][i]), pct(served[p][i]))
		}
	}
	fmt.Fprintf(w, "\n")
}

// writeSVG draws two panels over time: the share of the abusive client's
// requests denied, and the share of the well-behaved clients' requests
// served, a line per failure policy, with the outage shaded.
func (r *run) writeSVG(w io.Writer) {
	const (
		width, height     = 960.0, 600.0
		left, right       = 70.0, 190.0
		top1, h1          = 80.0, 290.0 // the abusive client's panel
		top2, h2          = 420.0, 110.0
		legendX, legendY0 = width - right + 20, top1 + 60
	)
	abuser, good, each := rates()
	plotW := width - left - right
	secs := r.cfg.duration.Seconds()
	x := func(t float64) float64 { return left + t/secs*plotW }

	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif">`+"\n",
		width, height, width, height)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text(b, width/2, 28, 18, "middle", "bold",
		fmt.Sprintf("A Redis outage: one client at %.0f requests/s against a limit of %d per %s", abuser, limit.Permits, per(limit.Interval)))
	text(b, width/2, 50, 12, "middle", "normal",
		fmt.Sprintf("net/http middleware, observed on one run; Redis killed at %.1f s, restarted empty at %.1f s",
			r.downAt.Seconds(), r.upAt.Seconds()))

	// line draws one series: each value at the end of the span it covers
	// (a bucket, or the limit's interval ending with a bucket).
	line := func(y func(float64) float64, vs []float64, span time.Duration, color, dash, extra string, title string) {
		var pts []string
		for i, v := range vs {
			if !math.IsNaN(v) {
				t := (time.Duration(i+1)*r.cfg.bucket - min(span, r.cfg.bucket)/2).Seconds()
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(min(t, secs)), y(v)))
			}
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s"%s%s><title>%s</title></polyline>`+"\n",
			strings.Join(pts, " "), color, dash, extra, html.EscapeString(title))
	}
	dashOf := func(p int) string {
		if p > 0 {
			return ` stroke-dasharray="6 3"`
		}
		return ""
	}
	panel := func(top, h float64, title string, ticks []float64, abusive bool) {
		y := func(v float64) float64 { return top + h - v*h }
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f2f2f2"/>`+"\n",
			x(r.downAt.Seconds()), top, x(r.upAt.Seconds())-x(r.downAt.Seconds()), h)
		for _, v := range ticks {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), left+plotW, y(v))
			text(b, left-8, y(v)+4, 12, "end", "normal", fmt.Sprintf("%.0f%%", 100*v))
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top, left, top+h)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+h, left+plotW, top+h)
		text(b, left, top-10, 13, "start", "bold", title)
		for p, pol := range policies {
			line(y, r.series(p, abusive, 0), 0, pol.color, dashOf(p), ` stroke-width="1" stroke-opacity="0.45"`,
				fmt.Sprintf("%s, per %v", pol.name, r.cfg.bucket))
			line(y, r.series(p, abusive, limit.Interval), limit.Interval, pol.color, dashOf(p), ` stroke-width="2.5"`,
				fmt.Sprintf("%s, over the last %v", pol.name, limit.Interval))
		}
	}

	// The abusive client, with the share the limit would deny.
	want := 1 - float64(limit.Permits)/(abuser*limit.Interval.Seconds())
	panel(top1, h1, fmt.Sprintf("Abusive client (%.0f requests/s): share of its requests denied", abuser),
		[]float64{0, 0.25, 0.5, 0.75, 1}, true)
	wy := top1 + h1 - want*h1
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="2 3"/>`+"\n", left, wy, left+plotW, wy)
	text(b, left+plotW+4, wy+4, 11, "start", "normal", fmt.Sprintf("the limit: %.0f%%", 100*want))
	mid := (x(r.downAt.Seconds()) + x(r.upAt.Seconds())) / 2
	text(b, mid, top1+h1/2, 13, "middle", "bold", "Redis down")

	panel(top2, h2, fmt.Sprintf("%d well-behaved clients (%.0f requests/s each): share of their requests served", good, each),
		[]float64{0, 0.5, 1}, false)

	for s := 0.0; s <= secs+1e-9; s++ {
		if int(s)%2 == 0 {
			text(b, x(s), top2+h2+18, 12, "middle", "normal", fmt.Sprintf("%.0f s", s))
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x(s), top2+h2, x(s), top2+h2+4)
	}

	for p, pol := range policies {
		ly := legendY0 + float64(p)*22
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"%s/>`+"\n",
			legendX, ly+7, legendX+22, ly+7, pol.color, dashOf(p))
		text(b, legendX+28, ly+11, 12, "start", "normal", pol.name)
	}
	ly := legendY0 + float64(len(policies))*22 + 12
	text(b, legendX, ly, 11, "start", "normal", fmt.Sprintf("bold: over the last %v", limit.Interval))
	text(b, legendX, ly+16, 11, "start", "normal", fmt.Sprintf("thin: per %v", r.cfg.bucket))
	text(b, left, height-16, 11, "start", "normal",
		"Time since the start, by when each request was sent. Client, middlewares and redis-server share one machine.")
	b.WriteString("</svg>\n")
	_, _ = io.WriteString(w, b.String())
}

// text writes one escaped SVG text element.
func text(b *strings.Builder, x, y, size float64, anchor, weight, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="%.0f" text-anchor="%s" font-weight="%s">%s</text>`+"\n",
		x, y, size, anchor, weight, html.EscapeString(s))
}
