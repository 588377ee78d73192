// Command tokens is an LLM-style API limited by tokens per minute per user:
// a request reserves its max_tokens, and once the completion is done, the
// policy settles it to the tokens it really used (prompt and completion),
// so a client that reserves little and uses much pays with its next
// requests.
//
//	go run ./examples/tokens
//	curl -s -XPOST -H 'X-User: alice' -d '{"prompt":"...","max_tokens":100,"use":12000}' http://127.0.0.1:8080/v1/completions
//
// ("use" stands for what the model would really produce, for the demo.)
//
// It takes its Redis from REDIS_URL (an embedded one when unset), its
// address from ADDR (127.0.0.1:8080), and the number of processes that
// share the budget from INSTANCES (1).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/embedded"
	"github.com/redlimit/redlimit/internal/redisurl"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// budget is each user's tokens per minute.
var budget = core.PerMinute(10_000)

func main() {
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
	// Each round trip stops at its decision's deadline (100 ms by default),
	// not at go-redis's 3 s ReadTimeout.
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	log.Printf("using Redis at %s", opts.Addr) // the address alone: the URL may hold a password

	client, err := core.New(rdb, core.WithKeyPrefix("example:"))
	if err != nil {
		log.Fatal(err)
	}
	// Check tells at start what keeps Redis from deciding, if anything. The
	// service starts all the same: its limits decide in memory, at this
	// instance's share, until Redis answers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Check(ctx); err != nil {
		log.Printf("redis check: %v: limiting in memory at this instance's share until Redis answers", err)
	} else {
		log.Printf("redis check: ok")
	}

	// INSTANCES is how many processes share the limits: while Redis cannot
	// decide, each one limits in memory at its share of the rate.
	instances := 1
	if n, err := strconv.Atoi(os.Getenv("INSTANCES")); err == nil && n > 0 {
		instances = n
	}

	srv := newServer(cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080"), newHandler(client, instances))
	ln, err := net.Listen("tcp", srv.Addr) // bound before the banner says so
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("tokens example listening on http://%s: %d tokens a minute per user (X-User)", srv.Addr, budget.Permits)
	log.Fatal(srv.Serve(ln))
}

// completion is the request body: the prompt, the most tokens the client
// accepts, and, for the demo, the tokens the "model" will use.
type completion struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
	Use       int64  `json:"use"`
}

// newHandler returns the API: POST /v1/completions, limited by the tokens
// policy on client, which instances processes share.
func newHandler(client *core.Client, instances int) http.Handler {
	// The reservation: max_tokens, from the body a middleware before the
	// limit decoded.
	reserve := nethttprl.CostFunc(func(r *http.Request) (int64, error) {
		c, _ := completionOf(r.Context())
		return c.MaxTokens, nil // below 1: the client's mistake, answered 400
	})
	tokens := policy.MustNew(client, "tokens", budget, policy.WithKey(keyfunc.Header("X-User")),
		policy.WithMissingKeyDeny(), policy.WithCostFunc(reserve), policy.WithFailLocal(instances))

	complete := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := completionOf(r.Context())
		used := int64(len(c.Prompt)/4) + c.Use // prompt and completion tokens
		// The real cost, known now: settled when the middleware returns.
		if err := tokens.Settle(r.Context(), used); err != nil {
			log.Printf("settle: %v", err) // a count out of range: the reservation stands
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"usage": map[string]int64{"total_tokens": used}})
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", decode(nethttprl.New(tokens)(complete)))
	return mux
}

// newServer returns the server of h on addr, with the timeouts of a server
// open to clients: without them, a slow or idle client holds its
// connection, and its memory, for as long as it likes.
func newServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:    addr,
		Handler: h,
		// A client has 5 s to send a request's header, 10 s for all of it.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// The answer is written within a minute of the request's header:
		// time for the model to write its completion.
		WriteTimeout: time.Minute,
		// A keep-alive connection is closed after a minute without a request.
		IdleTimeout: time.Minute,
	}
}

// decode reads the completion request into the request's context.
func decode(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c completion
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&c); err != nil {
			http.Error(w, "a JSON body is required", http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r.WithContext(withCompletion(r.Context(), c)))
	})
}
