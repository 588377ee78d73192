package nethttprl_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// clockClient is exampleClient for examples that move Redis's clock
// (miniredis's SetTime): without the local denial cache, which counts on
// the process's clock, which they do not move.
func clockClient() (*core.Client, *miniredis.Miniredis) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}),
		core.WithDenialCache(0))
	if err != nil {
		panic(err)
	}
	return client, mr
}

// retryAfter returns " Retry-After: " and w's Retry-After, if it has one.
func retryAfter(w *httptest.ResponseRecorder) string {
	if v := w.Header().Get("Retry-After"); v != "" {
		return " Retry-After: " + v
	}
	return ""
}

// A quota of requests a day per client IP, in the calendar of Paris: the
// day the clocks go forward is 23 hours long, which w says, and a refusal's
// Retry-After runs to midnight there, by Redis's clock.
func Example_quota() {
	client, mr := clockClient()
	defer mr.Close()

	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	daily := policy.MustNewQuota(client, "daily", core.Quota{Limit: 2, Period: core.Day, Location: paris})
	handler := nethttprl.New(daily)(http.HandlerFunc(handleHome))

	get := func(at time.Time) {
		mr.SetTime(at) // Redis's clock
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Println(at.Format("Jan 2 15:04 MST"), w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit")+
			retryAfter(w))
	}
	get(time.Date(2026, 3, 28, 12, 0, 0, 0, paris))
	for range 3 {
		get(time.Date(2026, 3, 29, 12, 0, 0, 0, paris)) // a day of 23 hours
	}
	// Output:
	// Mar 28 12:00 CET 200 "daily";q=2;w=86400 "daily";r=1;t=43200
	// Mar 29 12:00 CEST 200 "daily";q=2;w=82800 "daily";r=1;t=43200
	// Mar 29 12:00 CEST 200 "daily";q=2;w=82800 "daily";r=0;t=43200
	// Mar 29 12:00 CEST 429 "daily";q=2;w=82800 "daily";r=0;t=43200 Retry-After: 43200
}

// completionTokens stands for the tokens a completion used, prompt
// included, once the model is done: the demo reads them from X-Use.
func completionTokens(r *http.Request) int64 {
	n, _ := strconv.ParseInt(r.Header.Get("X-Use"), 10, 64)
	return n
}

// A monthly token budget per user: a request reserves its max_tokens, and
// settles to the tokens it used. A user who used more than the month
// holds is refused until the month ends, and has the whole budget again
// from the first of the next.
func Example_monthlyTokens() {
	client, mr := clockClient()
	defer mr.Close()

	// 1 000 000 tokens a month per user, from the first of the month,
	// 00:00 UTC. A request reserves its max_tokens, sent here in a header.
	maxTokens := nethttprl.CostFunc(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.Header.Get("X-Max-Tokens"), 10, 64)
	})
	monthly := policy.MustNewQuota(client, "tokens-month", core.Quota{Limit: 1_000_000, Period: core.Month},
		policy.WithKey(keyfunc.Header("X-User")), policy.WithMissingKeyDeny(), policy.WithCostFunc(maxTokens))
	complete := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := completionTokens(r)
		// The real cost, known now: settled when the middleware returns.
		if err := monthly.Settle(r.Context(), used); err != nil {
			log.Printf("settle: %v", err) // a count out of range: the reservation stands
		}
		fmt.Fprintf(w, `{"usage":{"total_tokens":%d}}`, used)
	})
	handler := nethttprl.New(monthly)(complete)

	post := func(at time.Time, user string, maxTokens, use int) {
		mr.SetTime(at) // Redis's clock
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
		r.Header.Set("X-User", user)
		r.Header.Set("X-Max-Tokens", strconv.Itoa(maxTokens))
		r.Header.Set("X-Use", strconv.Itoa(use))
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(at.Format("Jan 2 15:04"), user, w.Code, w.Header().Get("RateLimit")+retryAfter(w))
	}
	may31 := time.Date(2026, 5, 31, 22, 0, 0, 0, time.UTC)
	post(may31, "alice", 1000, 1_200_000) // served: it used 200 000 more than the month holds
	post(may31, "alice", 1, 1)            // in debt until June
	post(may31, "bob", 1000, 800)         // a budget of his own
	post(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), "alice", 1000, 800)
	// Output:
	// May 31 22:00 alice 200 "tokens-month";r=999000;t=7200
	// May 31 22:00 alice 429 "tokens-month";r=0;t=7200 Retry-After: 7200
	// May 31 22:00 bob 200 "tokens-month";r=999000;t=7200
	// Jun 1 00:00 alice 200 "tokens-month";r=999000;t=2592000
}
