// Command worker paces jobs with redlimit, without HTTP: each job waits for
// a permit (Limiter.Acquire) before it calls a third-party API that allows
// a fixed rate. Every process started with the same REDIS_URL shares the
// one budget, however many workers each runs.
//
//	go run ./examples/worker -rate 5/s -jobs 20 -workers 4
//	REDIS_URL=redis://localhost:6379 go run ./examples/worker & REDIS_URL=redis://localhost:6379 go run ./examples/worker
//
// It takes its Redis from REDIS_URL, or starts an embedded one when
// REDIS_URL is unset.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/embedded"
	"github.com/redlimit/redlimit/internal/redisurl"
)

func main() {
	rate := flag.String("rate", "5/s", "the API's limit, shared by every process (core.ParseRate)")
	jobs := flag.Int("jobs", 20, "jobs this process runs")
	workers := flag.Int("workers", 4, "goroutines running jobs")
	flag.Parse()
	r, err := core.ParseRate(*rate)
	if err != nil {
		log.Fatal(err)
	}
	// Redis is at REDIS_URL, such as redis://user:password@host:6379/0.
	// Without it, the demo starts an embedded Redis in this process; a
	// service would require REDIS_URL instead.
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		addr, stop, err := embedded.Start()
		if err != nil {
			log.Fatalf("embedded Redis: %v", err)
		}
		defer stop()
		redisURL = "redis://" + addr
		log.Print(embedded.Notice)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		// The error may quote the URL, password and all: say what is wrong
		// without it.
		log.Fatalf("REDIS_URL: %v", redisurl.Redact(err, redisURL))
	}
	// Each round trip stops at its context's deadline, not at go-redis's 3 s
	// ReadTimeout.
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	log.Printf("using Redis at %s", opts.Addr) // the address alone: the URL may hold a password

	client, err := core.New(rdb, core.WithKeyPrefix("example:"))
	if err != nil {
		log.Fatal(err)
	}
	// Check tells at start what keeps Redis from deciding, if anything.
	// Without Redis, Acquire fails, and the jobs stop.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Check(ctx); err != nil {
		log.Printf("redis check: %v", err)
	} else {
		log.Printf("redis check: ok")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, client, r, *jobs, *workers, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run runs jobs on workers goroutines, each job after a permit of the
// limiter "worker:third-party-api" at rate r, and prints each job and a
// summary to out.
func run(ctx context.Context, client *core.Client, r core.Rate, jobs, workers int, out io.Writer) error {
	limiter := client.Limiter("worker:third-party-api", core.WithRate(r))
	queue := make(chan int, jobs)
	for i := range jobs {
		queue <- i + 1
	}
	close(queue)

	start := time.Now()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range queue {
				// Acquire waits until the shared budget has a permit (or ctx
				// ends); it never sleeps longer than the exact wait.
				if err := limiter.Acquire(ctx, 1); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				callAPI(job)
				mu.Lock()
				fmt.Fprintf(out, "%6.2fs  worker %d  job %d\n", time.Since(start).Seconds(), w, job)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	took := time.Since(start)
	fmt.Fprintf(out, "%d jobs in %.2fs (%.1f/s); the limit, %v, is shared by every process on this Redis\n",
		jobs, took.Seconds(), float64(jobs)/took.Seconds(), r)
	return nil
}

// callAPI stands for the call to the rate-limited API.
func callAPI(int) { time.Sleep(5 * time.Millisecond) }

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
