package core_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

func ExampleRate() {
	fmt.Println(core.PerMinute(100))
	r := core.Rate{Type: core.PerClient, Permits: 5, Interval: 1500 * time.Millisecond, KeepAlive: time.Hour}
	fmt.Println(r, r.Validate())
	fmt.Println(core.Rate{Permits: 5, Interval: time.Second, KeepAlive: time.Millisecond}.Validate())
	// Output:
	// 100 per 1m0s (Overall)
	// 5 per 1.5s (PerClient, keepAlive 1h0m0s) <nil>
	// core: invalid rate: keepAlive 1ms is shorter than the interval 1s
}

// A limiter with a rate in code: the usual way to limit per user or per IP.
// Its keys expire on their own when it is idle.
func ExampleWithRate() {
	ctx := context.Background()

	// A redis.Client, ClusterClient or FailoverClient (Sentinel), with ContextTimeoutEnabled.
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	client, err := core.New(rdb) // no I/O: a service starts while Redis is down
	if err != nil {
		log.Fatal(err)
	}

	limiter := client.Limiter("api:user:42", core.WithRate(core.PerMinute(100)))
	res, err := limiter.TryAcquire(ctx, 1)
	switch {
	case err != nil: // Redis unreachable or slow, or a bad argument (errors.Is(err, core.ErrInvalidPermits))
		fmt.Println("no decision:", err)
	case !res.Allowed:
		fmt.Printf("over the limit; retry in %v\n", res.RetryAfter)
	default:
		fmt.Printf("allowed; %d left\n", res.Remaining)
	}
}

// A worker paces its calls to a third-party API with Acquire, which waits
// for the exact time until a permit is free; every process on the same
// Redis shares the budget. Acquire allows bursts of the whole rate: at 5
// per second, 5 calls go through at once (here on an embedded Redis whose
// clock stands still), then the next ones a second after them. For even
// spacing, give the rate as 1 per 200 ms.
func ExampleLimiter_Acquire() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) // Redis TIME stands still
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	jobs := []string{"a", "b", "c", "d", "e"}
	call := func(job string) { fmt.Println("called", job) }

	work := func() error {
		api := client.Limiter("partner-api", core.WithRate(core.PerSecond(5)))
		for _, job := range jobs {
			if err := api.Acquire(ctx, 1); err != nil { // waits the exact time; ends with ctx
				return err
			}
			call(job)
		}
		return nil
	}
	if err := work(); err != nil {
		panic(err)
	}
	res, _ := client.Limiter("partner-api", core.WithRate(core.PerSecond(5))).TryAcquire(ctx, 1)
	fmt.Println("a sixth call waits", res.RetryAfter)

	even := client.Limiter("partner-api-even", core.WithRate(core.Rate{Permits: 1, Interval: 200 * time.Millisecond}))
	first, _ := even.TryAcquire(ctx, 1)
	second, _ := even.TryAcquire(ctx, 1)
	fmt.Println("1 per 200 ms:", first.Allowed, "then a wait of", second.RetryAfter)
	// Output:
	// called a
	// called b
	// called c
	// called d
	// called e
	// a sixth call waits 1s
	// 1 per 200 ms: true then a wait of 200ms
}

// A limiter configured once, as with Redisson's trySetRate, then shared.
func ExampleLimiter_TrySetRate() {
	ctx := context.Background()
	client, _ := core.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	limiter := client.Limiter("payments-api")
	if _, err := limiter.TrySetRate(ctx, core.PerSecond(50)); err != nil {
		panic(err)
	}
	// Wait up to 200 ms for a permit, or give up at once when it cannot come
	// back in time.
	res, err := limiter.TryAcquireWithin(ctx, 1, 200*time.Millisecond)
	if errors.Is(err, core.ErrNotInitialized) {
		fmt.Println("the limiter's keys expired")
	}
	fmt.Println(res.Allowed)
}
