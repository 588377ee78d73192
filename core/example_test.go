package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	client, err := core.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		panic(err)
	}
	limiter := client.Limiter("api:user:42", core.WithRate(core.PerMinute(100)))
	res, err := limiter.TryAcquire(ctx, 1)
	switch {
	case err != nil:
		fmt.Println("redis unavailable:", err)
	case !res.Allowed:
		fmt.Printf("over the limit; retry in %v\n", res.RetryAfter)
	default:
		fmt.Printf("allowed; %d left\n", res.Remaining)
	}
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
