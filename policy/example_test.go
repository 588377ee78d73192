package policy_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/policy"
)

// A policy's name is its identity: policies of one name on one client share
// one budget, so they must agree on the rate and on what a request without
// a key gets. New reports a mistake at once, naming the option and the
// value; MustNew panics with the same error.
func Example_names() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	if err != nil {
		panic(err)
	}

	api := policy.MustNew(client, "api", core.PerMinute(100))
	// The same name and rate: one budget, whichever routes each applies to.
	sameBudget := policy.MustNew(client, "api", core.PerMinute(100))
	// The same name with another rate is an error.
	_, err = policy.New(client, "api", core.PerMinute(50))
	fmt.Println(err)
	// So is an option that cannot work.
	_, err = policy.New(client, "upload", core.PerSecond(5), policy.WithCost(6))
	fmt.Println(err)

	_, _ = api, sameBudget
	// Output:
	// policy "api": core: invalid option: a policy of this name on this client has the rate 100 per 1m0s (Overall), and this one the rate 50 per 1m0s (Overall); policies of one name share one budget, so give each limit a name of its own
	// policy "upload": WithCost(6): core: invalid permits: the cost must be from 1 to the rate's 5 permits
}

// A policy tells an operator its name, kind and limit as JSON, as package
// admin lists it.
func ExamplePolicy_MarshalJSON() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	if err != nil {
		panic(err)
	}

	user := policy.MustNew(client, "user", core.PerMinute(5))
	exports := policy.MustNewConcurrency(client, "exports", 2)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	daily := policy.MustNewQuota(client, "daily", core.Quota{Limit: 1000, Period: core.Day, Location: paris})
	for _, p := range []*policy.Policy{user, exports, daily} {
		b, err := json.Marshal(p)
		if err != nil {
			panic(err)
		}
		fmt.Println(string(b))
	}
	// Output:
	// {"name":"user","kind":"rate","limit":5,"interval_ms":60000}
	// {"name":"exports","kind":"concurrency","limit":2}
	// {"name":"daily","kind":"quota","limit":1000,"period":"day","time_zone":"Europe/Paris"}
}
