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
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// budget is each user's tokens per minute.
var budget = core.PerMinute(10_000)

func main() {
	client, stop := demo.Client()
	defer stop()
	srv := &http.Server{Addr: demo.Addr(), Handler: newHandler(client), ReadHeaderTimeout: 5 * time.Second}
	log.Printf("tokens example listening on http://%s: %d tokens a minute per user (X-User)", demo.Addr(), budget.Permits)
	log.Fatal(srv.ListenAndServe())
}

// completion is the request body: the prompt, the most tokens the client
// accepts, and, for the demo, the tokens the "model" will use.
type completion struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
	Use       int64  `json:"use"`
}

// newHandler returns the API: POST /v1/completions, limited by the tokens
// policy.
func newHandler(client *core.Client) http.Handler {
	// The reservation: max_tokens, from the body a middleware before the
	// limit decoded.
	reserve := nethttprl.CostFunc(func(r *http.Request) (int64, error) {
		c, _ := completionOf(r.Context())
		return c.MaxTokens, nil // below 1: the client's mistake, answered 400
	})
	tokens := policy.MustNew(client, "tokens", budget, policy.WithKey(keyfunc.Header("X-User")),
		policy.WithMissingKeyDeny(), policy.WithCostFunc(reserve), policy.WithFailLocal(demo.Instances()))

	complete := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := completionOf(r.Context())
		used := int64(len(c.Prompt)/4) + c.Use // prompt and completion tokens
		// The real cost, known now: settled when the middleware returns.
		tokens.Settle(r.Context(), used)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"usage": map[string]int64{"total_tokens": used}})
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", decode(nethttprl.New(tokens)(complete)))
	return mux
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
