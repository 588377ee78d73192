package main

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/observe"
)

// fakeRun is a run of 4 s with Redis down from 1 s to 2 s: the abusive
// client (10 requests per 250 ms) is denied 9 in 10 throughout under the
// second policy, and served under the first while Redis is down; the
// well-behaved clients are always served.
func fakeRun() *run {
	r := &run{cfg: config{duration: 4 * time.Second, downAt: time.Second, downFor: time.Second, bucket: 250 * time.Millisecond},
		env: "test machine", downAt: time.Second, upAt: 2 * time.Second}
	for p := range policies {
		for at := time.Duration(0); at < r.cfg.duration; at += 25 * time.Millisecond {
			status := 429
			if at%(250*time.Millisecond) == 0 || (p == 0 && at >= r.downAt && at < r.upAt) {
				status = 200
			}
			r.samples = append(r.samples, sample{policy: p, abusive: true, at: at, status: status, latency: time.Millisecond})
			if at%(125*time.Millisecond) == 0 {
				r.samples = append(r.samples, sample{policy: p, at: at, status: 200, latency: 2 * time.Millisecond})
			}
		}
		r.events = append(r.events,
			event{policy: p, at: 1500 * time.Millisecond, outcome: observe.ErrorServed},
			event{policy: p, at: 2100 * time.Millisecond, outcome: observe.FallbackAllowed},
			event{policy: p, at: time.Duration(2200+100*p) * time.Millisecond, outcome: observe.Allowed})
	}
	r.events = append(r.events, event{policy: 1, at: 1010 * time.Millisecond, fallback: true, active: true},
		event{policy: 1, at: 2300 * time.Millisecond, fallback: true})
	return r
}

func TestSeries(t *testing.T) {
	r := fakeRun()
	open := r.series(0, true, 0)
	if got, want := len(open), 16; got != want {
		t.Fatalf("buckets = %d, want %d", got, want)
	}
	for i, want := range map[int]float64{0: 0.9, 3: 0.9, 4: 0, 7: 0, 8: 0.9, 15: 0.9} {
		if got := open[i]; math.Abs(got-want) > 1e-9 {
			t.Errorf("fail open, bucket %d: denied %v, want %v", i, got, want)
		}
	}
	// Over the last second: the bucket ending at 1.5 s holds two buckets
	// before the outage and two in it.
	if got, want := r.series(0, true, time.Second)[5], 0.45; math.Abs(got-want) > 1e-9 {
		t.Errorf("fail open, last second at 1.5 s: denied %v, want %v", got, want)
	}
	if got := r.series(1, false, 0)[6]; got != 1 {
		t.Errorf("well-behaved served %v, want 1", got)
	}
	empty := &run{cfg: r.cfg}
	if got := empty.series(0, true, 0)[0]; !math.IsNaN(got) {
		t.Errorf("an empty bucket's share is %v, want NaN", got)
	}
	if d, ok := r.recovery(1); !ok || d != 300*time.Millisecond {
		t.Errorf("recovery = %v, %v, want 300ms: the first decision by Redis, not the fallback's", d, ok)
	}
}

func TestMarkdown(t *testing.T) {
	var b strings.Builder
	fakeRun().writeMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"| | fail open | fail local (default) |",
		"| abusive client: denied before the outage | 90.0% (36 of 40) | 90.0% (36 of 40) |",
		"| abusive client: denied while Redis was down | 0.0% (0 of 40) | 90.0% (36 of 40) |",
		"| abusive client: served while Redis was down (the limit allows 5) | 40 | 4 |",
		"| well-behaved clients: served, whole run | 100.0% (32 of 32) | 100.0% (32 of 32) |",
		"| first decision by Redis after it answered again | 200 ms later | 300 ms later |",
		"| local fallback | – | on at 1.01 s, off at 2.30 s |",
		"| decisions while Redis was down, by outcome (the metrics' `outcome` label) | error_served 1 | error_served 1 |",
		"| sent at | Redis |",
		"| 0.75 s | up | 90.0% | 100.0% | 90.0% | 100.0% |",
		"| 1.00 s | down | 0.0% | 100.0% | 90.0% | 100.0% |",
		"| 3.75 s | up |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("outage.md lacks %q:\n%s", want, md)
		}
	}
}

func TestSVG(t *testing.T) {
	var b strings.Builder
	fakeRun().writeSVG(&b)
	svg := b.String()
	d := xml.NewDecoder(strings.NewReader(svg))
	lines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("outage.svg is not well-formed XML: %v", err)
		}
		if e, ok := tok.(xml.StartElement); ok && e.Name.Local == "polyline" {
			lines++
		}
	}
	// Two panels, two policies, per bucket and over the last second.
	if got, want := lines, 8; got != want {
		t.Errorf("%d lines, want %d", got, want)
	}
	for _, want := range []string{"Redis down", "fail open", "fail local (default)", "the limit: 90%"} {
		if !strings.Contains(svg, want) {
			t.Errorf("outage.svg lacks %q", want)
		}
	}
}
