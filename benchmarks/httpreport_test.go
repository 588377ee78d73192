package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// fakeHTTPReport has scenario h's rows: ten runs a point, each spread by
// ±4.5% around a median (the interval: ±3.5%). On net/http with many keys, ulule/limiter's
// throughput overlaps redlimit's; fiber's limiter returned errors in one
// run at one connection with the hot key.
func fakeHTTPReport() *report {
	r := &report{Env: "test machine", Total: time.Minute, Samples: 10}
	add := func(stack, kc, mw string, conns int, rate float64, p50 time.Duration, redis bool) *row {
		x := row{Scenario: "h", Case: httpCase(stack, kc), Library: mw, Callers: conns}
		for i := range 10 {
			f := 1 + (float64(i)-4.5)/100
			s := sample{Decisions: int64(math.Round(rate * f)), Elapsed: time.Second,
				P50: time.Duration(float64(p50) * f), P99: time.Duration(float64(3*p50) * f), Allocs: 40}
			if kc == caseManyKeys {
				s.Allowed = s.Decisions
			}
			if redis {
				s.Redis = &redisCost{Commands: 2, RoundTrips: 1, CPU: 20, Mix: map[string]float64{"evalsha": 1, "zadd": 1}}
			}
			x.Runs = append(x.Runs, s)
		}
		x.sample = x.Runs[5]
		r.Rows = append(r.Rows, x)
		return &r.Rows[len(r.Rows)-1]
	}
	for _, conns := range httpConnections {
		us := time.Microsecond
		add("net/http", caseManyKeys, mwBare, conns, 40_000, 50*us, false)
		add("net/http", caseManyKeys, mwRedlimit, conns, 20_000, 150*us, true)
		add("net/http", caseManyKeys, mwUlule, conns, 20_100, 200*us, true)
		add("net/http", caseManyKeys, mwHTTPRate, conns, 5_000, 300*us, true)
		add("net/http", caseHotKey, mwRedlimit, conns, 38_000, 55*us, true)
		add("net/http", caseHotKey, mwUlule, conns, 19_000, 150*us, true)
		add("net/http", caseHotKey, mwHTTPRate, conns, 8_000, 120*us, true)
		add("fiber v2", caseManyKeys, mwBare, conns, 60_000, 40*us, false)
		add("fiber v2", caseManyKeys, mwRedlimit, conns, 25_000, 140*us, true)
		add("fiber v2", caseManyKeys, mwFiberLimiter, conns, 6_000, 250*us, true)
		add("fiber v2", caseHotKey, mwRedlimit, conns, 55_000, 45*us, true)
		x := add("fiber v2", caseHotKey, mwFiberLimiter, conns, 6_500, 240*us, true)
		if conns == 1 {
			x.OtherErrors = 1
		}
	}
	return r
}

func TestHTTPMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := fakeHTTPReport().writeHTTPMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"# redlimit benchmarks: each library's own middleware through HTTP (scenario h)",
		"Each figure is the median of 10 runs",
		"| comparison | requests/s, 64 connections | p50, 1 connection | p99, 1 connection |",
		// Throughputs that overlap are not told apart; latencies are.
		"| net/http, many keys, allowed: redlimit ÷ ulule/limiter | ~ (1.00× [0.97, 1.03], p=",
		"| **0.75×** [0.73, 0.77] (p=0.000) | **0.75×** [0.73, 0.77] (p=0.000) |",
		"| net/http, many keys, allowed: redlimit ÷ httprate + httprate-redis | **4.00×** [3.88, 4.12] (p=0.000) | **0.50×** [0.49, 0.52] (p=0.000) | **0.50×** [0.49, 0.52] (p=0.000) |",
		"| fiber v2, many keys, allowed: redlimit ÷ fiber limiter + storage/redis | **4.17×** [4.04, 4.29] (p=0.000) |",
		// A point with errors gives no ratio.
		"| fiber v2, hot key, over its limit: redlimit ÷ fiber limiter + storage/redis | **8.46×** [8.21, 8.72] (p=0.000) | n/a (errors in fiber limiter + storage/redis) |",
		"| stack | middleware | requests/s ÷ bare, 64 connections | Δ p50, 1 connection | Δ p99, 1 connection | Δ allocs/req, 1 connection |",
		"| net/http | redlimit | 0.50× [0.49, 0.52] (p=0.000) | **+100.0 µs** | **+300.0 µs** | +0.0 |",
		"## net/http, load client: net/http (Transport, keep-alive)",
		"## fiber v2, load client: fasthttp (HostClient, keep-alive)",
		"| many keys, allowed | redlimit | 64 | 20 000 [19 300, 20 700] | 150.0 [144.8, 155.2] µs | 450.0 [434.2, 465.7] µs | 40.0 | 2.00 | 1.00 | 20.0 | 100.0% | 0 |",
		"| many keys, allowed | bare (no middleware) | 1 | 40 000 [38 600, 41 400] | 50.0 [48.2, 51.7] µs | 150.0 [144.8, 155.2] µs | 40.0 | – | – | – | 100.0% | 0 |",
		"| hot key, over its limit | fiber limiter + storage/redis | 1 | 6 500 [6 273, 6 727] |",
		"| 0.0% | 0 (+1 in other runs) |",
		"| net/http, hot key, over its limit | redlimit | EVALSHA 1.00, ZADD 1.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "| fiber v2, hot key, over its limit | bare") {
		t.Error("the bare server is measured in the hot-key case")
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestHTTPSVG(t *testing.T) {
	var b bytes.Buffer
	if err := fakeHTTPReport().writeHTTPSVG(&b); err != nil {
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
	for _, want := range []string{"Requests per second through HTTP, 64 connections",
		">net/http: many keys</text>", ">net/http: hot key</text>", ">fiber v2: many keys</text>", ">fiber v2: hot key</text>",
		">bare (no middleware)</text>", ">redlimit</text>", ">ulule/limiter</text>", ">httprate + httprate-redis</text>",
		">fiber limiter + storage/redis</text>",
		">60k</text>", ">20k</text>", // bar labels and ticks on a linear scale from 0
		">0</text>",
		"<title>redlimit, net/http: many keys: 20 000 [19 300, 20 700] requests/s</title>",
		`stroke="#222"`, // a whisker
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(svg)
	}
}
