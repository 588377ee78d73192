// Package demo holds what the example servers share: where Redis is, where
// to listen, and the demo's stand-in for authentication.
package demo

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// UserKey is the key under which the gin, echo and fiber examples store
// the signed-in user in their request-scoped values (the net/http example
// uses a context key of its own type, as context keys should be).
const UserKey = "user"

// UserHeader is the header the demo trusts as "authentication". A real
// service takes the user from its session or token middleware instead.
const UserHeader = "X-User"

// Addr is where the example listens: $ADDR, else 127.0.0.1:8080.
func Addr() string {
	if a := os.Getenv("ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:8080"
}

// Client returns a redlimit client on the Redis at $REDIS_URL (for
// instance redis://localhost:6379/0), or, when REDIS_URL is unset, on an
// embedded Redis (miniredis) started in this process, and says which.
func Client() (*core.Client, func()) {
	var rdb *redis.Client
	stop := func() {}
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			log.Fatalf("REDIS_URL: %v", err)
		}
		opts.ContextTimeoutEnabled = true // stop at the limiter's 100 ms decision timeout
		rdb = redis.NewClient(opts)
		log.Printf("using Redis at %s", opts.Addr)
	} else {
		mr, err := miniredis.Run()
		if err != nil {
			log.Fatalf("embedded Redis: %v", err)
		}
		// Count TTLs down with the wall clock, as Redis does: left to
		// itself, miniredis expires keys only when told to, and an idle
		// client's limiter would then never go away.
		mr.ClockTTL(true)
		rdb = redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		stop = mr.Close
		log.Printf("REDIS_URL is unset: using an embedded Redis (miniredis) at %s; set REDIS_URL=redis://host:6379 to share limits between processes", mr.Addr())
	}
	c, err := core.New(rdb, core.WithKeyPrefix("example:"))
	if err != nil {
		log.Fatal(err)
	}
	// A service learns at start what keeps Redis from deciding, if
	// anything; it starts all the same, and its limits decide in memory
	// (each instance its share) until Redis answers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Check(ctx); err != nil {
		log.Printf("redis check: %v: limiting in memory at this instance's share until Redis answers", err)
	} else {
		log.Printf("redis check: ok")
	}
	return c, func() { _ = rdb.Close(); stop() }
}

// Instances is how many processes share the limits: $INSTANCES, else 1.
// Each one's local fallback limits at its share of the rate while Redis
// cannot decide.
func Instances() int {
	if n, err := strconv.Atoi(os.Getenv("INSTANCES")); err == nil && n > 0 {
		return n
	}
	return 1
}

// Policies are the demo's limits, built once and applied by every example
// with its framework's adapter: a global limit per client IP, a login limit
// in wait mode, and a limit per user, whose key user reads from the
// framework's own context.
type Policies struct {
	Global, Login, PerUser *policy.Policy
}

// NewPolicies builds the demo's policies on client.
func NewPolicies(client *core.Client, user keyfunc.KeyFunc) Policies {
	share := policy.WithFailLocal(Instances())
	return Policies{
		Global: policy.MustNew(client, "global", core.Rate{Permits: 10, Interval: 10 * time.Second}, share),
		Login: policy.MustNew(client, "login", core.Rate{Permits: 1, Interval: 2 * time.Second},
			policy.WithWait(3*time.Second), share),
		PerUser: policy.MustNew(client, "user", core.PerMinute(5), policy.WithKey(user), share),
	}
}

// Banner prints how to try the example.
func Banner(framework string) {
	fmt.Printf(`%s example listening on http://%s
  GET  /        10 requests per 10 s per client IP
  POST /login   also 1 per 2 s per IP; waits up to 3 s for a permit
  GET  /me      also 5 per minute per user (send %s: alice)
  GET  /health  not limited
Try: for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code}\n' http://%s/; done
`, framework, Addr(), UserHeader, Addr())
}
