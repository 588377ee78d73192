// Command benchmarks measures redlimit against its peer libraries on a
// redis-server of its own and writes results.md and chart.svg (scenarios a
// to g, i and s), and http.md and http.svg (scenario h):
//
//	go run . [-duration 200ms] [-warmup 100ms] [-samples 10] [-only abcdefghis] [-out results]
//
// See README.md for the scenarios and the columns.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/benchmarks/internal/host"

	"github.com/redlimit/redlimit/internal/testkit/redistest"
)

func main() {
	duration := flag.Duration("duration", 200*time.Millisecond, "measured time of each run (scenario d: a quarter of it; s: at most 300ms)")
	samples := flag.Int("samples", 10, "runs of each measurement, in turns with the other libraries: each figure is their median, "+
		"with a confidence interval from 6 runs and significance tests from 4")
	warmup := flag.Duration("warmup", 100*time.Millisecond, "unmeasured time before each run (scenario d: half of it; s: at most 100ms)")
	out := flag.String("out", "results", "directory of the reports and charts")
	only := flag.String("only", "abcdefghis", "the scenarios to run, by letter (h: the middleware through HTTP; i: one caller, the libraries in turns decision by decision; s: the cost of a script call)")
	flag.Parse()
	selected = *only
	if *duration <= 0 || *warmup <= 0 || *samples <= 0 {
		log.Fatal("-duration, -warmup and -samples must be positive")
	}
	if err := run(*duration, *warmup, *samples, *out); err != nil {
		log.Printf("benchmarks: %v", err)
		os.Exit(1)
	}
}

func run(duration, warmup time.Duration, samples int, out string) error {
	start := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := redistest.Start() // persistence off: --save "" --appendonly no
	if err != nil {
		return err
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	version, err := admin.InfoMap(ctx, "server").Result()
	if err != nil {
		return err
	}
	log.Printf("redis-server %s on %s", version["Server"]["redis_version"], srv.Addr)

	h := &harness{addr: srv.Addr, admin: admin, warmup: warmup, duration: duration, samples: samples}
	// Scenario d measures 3 limits x 6 libraries x 3 caller counts, each
	// over samples runs: a quarter of the duration keeps it short. Its
	// denials need little warm-up.
	hd := *h
	hd.duration, hd.warmup = duration/4, warmup/2
	// Scenario s reads a per-call average over tens of thousands of calls:
	// a short run is enough.
	hs := *h
	hs.duration, hs.warmup = min(duration, scriptRun), min(warmup, scriptWarmup)

	rep := &report{Env: fmt.Sprintf("%s, %s/%s, %d CPUs (GOMAXPROCS %d, go-redis default PoolSize %d), %s, redis-server %s. "+
		"Each run: %v warm-up, %v measured (scenario d: %v and %v; s: %v and %v); "+
		"every figure is over %d runs, taken in turns with the other libraries.",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), defaultPoolSize(), host.CPUModel(),
		version["Server"]["redis_version"], warmup, duration, hd.warmup, hd.duration, hs.warmup, hs.duration, samples),
		Samples: samples}
	if newMemoryRedis == nil {
		rep.Notes = append(rep.Notes, "Scenario e's memory-core variant did not run: package internal/memredis "+
			"was not present when this binary was built (see memcore.go).")
	}

	load := host.LoadAverage()
	err = measureAll(ctx, h, &hd, &hs, rep)
	rep.Total = time.Since(start)
	rep.Env += fmt.Sprintf(" 1-minute load average: %s at the start, %s at the end.", load, host.LoadAverage())
	if werr := write(rep, out); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}

// measureAll runs the selected scenarios, adding to rep as it goes.
func measureAll(ctx context.Context, h, hd, hs *harness, rep *report) error {
	all := []library{redlimitLib, redlimitNoCoalesceLib, redlimitNoCacheLib, redisRateLib, ululeLib, httprateLib, floorLib}
	peers := []library{redlimitLib, redisRateLib, ululeLib, httprateLib, floorLib}
	oneKey := []library{redlimitLib, redlimitNoCoalesceLib, redisRateLib, ululeLib, httprateLib, floorLib}
	rows, err := h.runScenarios(ctx, []scenario{
		{"a", all, allowedPath, poolCases},
		{"b", all, deniedPath, nil},
		{"c", all, mixedPath, nil},
		{"f", peers, newKeysPath, nil},
		{"g", oneKey, globalPath, nil},
	})
	rep.Rows = append(rep.Rows, rows...)
	if err != nil {
		return err
	}
	if wanted("a") {
		mem, err := h.keyMemory(ctx, peers[:len(peers)-1])
		rep.Memory = append(rep.Memory, mem...)
		if err != nil {
			return err
		}
	}
	if wanted("d") {
		rows, mem, err := hd.runD(ctx, []bigGroup{
			{redlimitNoCacheLib, []library{redlimitNoCacheLib, redlimitLib}},
			{redlimitPerClientLib, []library{redlimitPerClientLib}},
			{redisRateLib, []library{redisRateLib}},
			{ululeLib, []library{ululeLib}},
			{httprateLib, []library{httprateLib}},
			{floorLib, []library{floorLib}},
		})
		rep.Rows = append(rep.Rows, rows...)
		rep.Memory = append(rep.Memory, mem...)
		if err != nil {
			return err
		}
	}
	if wanted("e") {
		rows, err := h.runE(ctx)
		rep.Rows = append(rep.Rows, rows...)
		if err != nil {
			return err
		}
	}
	if wanted("i") {
		rows, err := h.runI(ctx)
		rep.Rows = append(rep.Rows, rows...)
		if err != nil {
			return err
		}
	}
	if wanted("s") {
		rows, err := hs.runS(ctx)
		rep.Rows = append(rep.Rows, rows...)
		if err != nil {
			return err
		}
	}
	if wanted("h") {
		rows, err := h.runH(ctx)
		rep.Rows = append(rep.Rows, rows...)
		if err != nil {
			return err
		}
	}
	return nil
}

// selected holds the letters of the scenarios to run (-only).
var selected string

// wanted reports whether scenario id is to run.
func wanted(id string) bool { return strings.Contains(selected, id) }

// write writes into dir results.md and chart.svg when a scenario of them
// ran, and http.md and http.svg when scenario h did, and the reports to
// stdout. A run of scenario h alone leaves results.md as it was, and the
// other way round.
func write(rep *report, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	type output struct {
		md, svg  string
		writeMD  func(io.Writer) error
		writeSVG func(io.Writer) error
	}
	var outs []output
	if strings.ContainsAny(selected, "abcdefgis") {
		outs = append(outs, output{"results.md", "chart.svg", rep.writeMarkdown, rep.writeSVG})
	}
	if wanted("h") {
		outs = append(outs, output{"http.md", "http.svg", rep.writeHTTPMarkdown, rep.writeHTTPSVG})
	}
	for _, o := range outs {
		var md, svg bytes.Buffer
		if err := o.writeMD(&md); err != nil {
			return err
		}
		if err := o.writeSVG(&svg); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, o.md), md.Bytes(), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, o.svg), svg.Bytes(), 0o644); err != nil {
			return err
		}
		if _, err := os.Stdout.Write(md.Bytes()); err != nil {
			return err
		}
	}
	return nil
}
