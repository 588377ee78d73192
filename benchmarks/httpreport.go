package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// httpColors are the colors of scenario h's chart, by middleware.
var httpColors = []chartSeries{
	{mwBare, "#7f7f7f"},
	{mwRedlimit, "#d62728"},
	{mwUlule, "#2ca02c"},
	{mwHTTPRate, "#9467bd"},
	{mwFiberLimiter, "#8c564b"},
}

// httpThroughput and httpLatency are the connections of scenario h's
// throughput and latency figures.
const (
	httpThroughput = 64
	httpLatency    = 1
)

// httpKeyFigures compares redlimit with each peer of its stack in each key
// case: requests/s at 64 connections, p50 and p99 at 1 connection, as
// ratios of the medians (redlimit ÷ the peer), "~" when not significant.
func (r *report) httpKeyFigures() [][]string {
	var lines [][]string
	for _, st := range httpStacks {
		for _, kc := range httpCases {
			cs := httpCase(st.name, kc)
			for _, mw := range st.mws {
				if mw.name == mwRedlimit || !mw.redis {
					continue
				}
				line := []string{fmt.Sprintf("%s, %s: redlimit ÷ %s", st.name, kc, mw.name)}
				for _, f := range []struct {
					conns int
					m     metric
				}{{httpThroughput, byRate}, {httpLatency, byP50}, {httpLatency, byP99}} {
					ours, ok1 := r.find("h", cs, mwRedlimit, f.conns)
					peer, ok2 := r.find("h", cs, mw.name, f.conns)
					switch {
					case !ok1 || !ok2:
						line = append(line, "not measured")
					case erred(ours, peer) != "":
						line = append(line, erred(ours, peer))
					default:
						line = append(line, versus(ours.values(f.m), peer.values(f.m)))
					}
				}
				lines = append(lines, line)
			}
		}
	}
	return lines
}

// httpCosts is what each middleware adds to the bare server of its stack
// with many keys: its throughput at 64 connections as a share of the bare
// server's, and the differences of p50, p99 and allocations at 1
// connection.
func (r *report) httpCosts() [][]string {
	var lines [][]string
	for _, st := range httpStacks {
		cs := httpCase(st.name, caseManyKeys)
		for _, mw := range st.mws {
			if !mw.redis {
				continue
			}
			line := []string{st.name, mw.name}
			if x, bare, ok := r.findPair(cs, mw.name, httpThroughput); ok {
				line = append(line, plain(versus(x.values(byRate), bare.values(byRate))))
			} else {
				line = append(line, bare.Library)
			}
			if x, bare, ok := r.findPair(cs, mw.name, httpLatency); ok {
				line = append(line, delta(x.values(byP50Micros), bare.values(byP50Micros), " µs"),
					delta(x.values(byP99Micros), bare.values(byP99Micros), " µs"),
					signed(x.median(byAllocs)-bare.median(byAllocs)))
			} else {
				line = append(line, bare.Library, bare.Library, bare.Library)
			}
			lines = append(lines, line)
		}
	}
	return lines
}

// findPair returns the measurement of mw in case cs at conns, and the bare
// server's; when either is missing or failed, ok is false and the second
// row's Library says why.
func (r *report) findPair(cs, mw string, conns int) (x, bare row, ok bool) {
	x, ok1 := r.find("h", cs, mw, conns)
	bare, ok2 := r.find("h", cs, mwBare, conns)
	switch {
	case !ok1 || !ok2:
		return x, row{Library: "not measured"}, false
	case erred(x, bare) != "":
		return x, row{Library: erred(x, bare)}, false
	}
	return x, bare, true
}

// writeHTTPMarkdown writes scenario h's report.
func (r *report) writeHTTPMarkdown(w io.Writer) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "# redlimit benchmarks: each library's own middleware through HTTP (scenario h)\n\n%s\n\nTotal run time: %s.\n\n",
		r.Env, r.Total.Round(time.Second))
	b.WriteString("The server, its middleware, the load client and redis-server share this machine's cores: the figures are " +
		"ratios for this machine, not absolutes. See README.md, scenario h, for the set-up.\n\n")
	b.WriteString(intervalNote(r.Samples) + " Redis's figures and the share allowed are those of the point's median run " +
		"by requests/s (of an even number of runs, the upper of the middle two); allocations the median of the runs.\n\n")

	b.WriteString("## Key figures\n\n" +
		"Redlimit ÷ each peer on the same stack, client and Redis: above 1 in requests/s, and below 1 in latency, redlimit is " +
		"faster.\n\n")
	table(b, []string{"comparison", fmt.Sprintf("requests/s, %d connections", httpThroughput),
		fmt.Sprintf("p50, %s", httpConns(httpLatency)), fmt.Sprintf("p99, %s", httpConns(httpLatency))}, r.httpKeyFigures())

	b.WriteString("## What each middleware costs (many keys)\n\n" +
		"Against the bare server of its stack: requests/s as a share of the bare server's, and what it adds to one request's " +
		"latency and allocations (client, server and Redis client together) at one connection.\n\n")
	table(b, []string{"stack", "middleware", fmt.Sprintf("requests/s ÷ bare, %d connections", httpThroughput),
		"Δ p50, 1 connection", "Δ p99, 1 connection", "Δ allocs/req, 1 connection"}, r.httpCosts())

	for _, st := range httpStacks {
		fmt.Fprintf(b, "## %s, load client: %s\n\n", st.name, st.client)
		var lines [][]string
		for _, kc := range httpCases {
			for _, x := range r.sorted("h") {
				if x.Case != httpCase(st.name, kc) {
					continue
				}
				line := append([]string{kc, x.Library, strconv.Itoa(x.Callers)}, clientCells(x)...)
				line = append(line, redisCells(x)[:3]...)
				lines = append(lines, append(line, percent(x.Allowed, x.Decisions), errorCell(x)))
			}
		}
		table(b, []string{"case", "middleware", "connections", "requests/s", "p50", "p99", "allocs/req",
			"Redis cmds/req", "round trips/req", "Redis CPU µs/req", "allowed", "errors"}, lines)
	}

	b.WriteString("## Redis commands per request\n\n" +
		fmt.Sprintf("Calls of each command per request at %d connections, from INFO commandstats (those run by scripts included).\n\n", httpThroughput))
	var mix [][]string
	for _, x := range r.sorted("h") {
		if x.Callers == httpThroughput && x.Library != mwBare {
			mix = append(mix, []string{x.Case, x.Library, commandMix(x)})
		}
	}
	table(b, []string{"case", "middleware", "commands per request"}, mix)

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

// writeHTTPSVG draws scenario h's requests per second at 64 connections:
// a group per stack and key case, a bar per middleware, on a linear scale.
func (r *report) writeHTTPSVG(w io.Writer) error {
	type group struct{ stack, kc string }
	var groups []group
	c := barChart{
		title:    fmt.Sprintf("Requests per second through HTTP, %d connections", httpThroughput),
		subtitle: "server, load client and Redis on the same machine: compare ratios, not absolutes; whiskers: confidence interval of the median",
		footnote: "net/http driven by a net/http client, fiber v2 by a fasthttp client, over keep-alive connections on loopback;\n" +
			"one redis-server and one go-redis pool (its default size) for every middleware; the hot key is over its limit (429s).",
		unit:   "requests/s",
		series: httpColors,
	}
	for _, st := range httpStacks {
		for _, kc := range httpCases {
			groups = append(groups, group{st.name, kc})
			name, _, _ := strings.Cut(kc, ",")
			c.groups = append(c.groups, st.name+": "+name)
		}
	}
	c.value = func(gi, si int) (dist, bool) {
		g := groups[gi]
		x, ok := r.find("h", httpCase(g.stack, g.kc), httpColors[si].name, httpThroughput)
		if !ok {
			return dist{}, false
		}
		d := x.dist(byRate)
		return d, d.Center > 0
	}
	return c.write(w)
}
