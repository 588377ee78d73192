package nethttprl_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/memredis"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// BenchmarkMiddleware measures one request through net/http with and without the
// middleware, on a core that answers from memory (internal/memredis), and
// the core decision alone: the middleware's own cost is "limited" less
// "bare" less "core".
func BenchmarkMiddleware(b *testing.B) {
	rate := core.PerMinute(1_000_000)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	serve := func(b *testing.B, h http.Handler) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:4242"
		w := &discard{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	}
	b.Run("bare", func(b *testing.B) {
		serve(b, ok)
	})
	b.Run("limited", func(b *testing.B) {
		client, err := core.New(memredis.New())
		if err != nil {
			b.Fatal(err)
		}
		serve(b, nethttprl.New(policy.MustNew(client, "bench", rate, policy.WithTimeout(10*time.Second)))(ok))
	})
	b.Run("core", func(b *testing.B) { memredis.Decide(b, "bench:192.0.2.1", rate) })
}

// discard is a ResponseWriter that keeps only the status and headers.
type discard struct {
	h    http.Header
	code int
}

func (w *discard) Header() http.Header { return w.h }
func (w *discard) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *discard) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}

// A request through the middleware allocates 10 objects beyond the
// handler's: the core decision's 6 (see core's TestADecisionAllocatesSix),
// and the middleware's 4: its exchange, the request copy that carries it,
// the limiter name, and one string for the rate limit headers' values.
func TestARequestAllocatesTen(t *testing.T) {
	client, err := core.New(memredis.New())
	require.NoError(t, err)
	h := nethttprl.New(policy.MustNew(client, "bench", core.PerMinute(1_000_000), policy.WithTimeout(10*time.Second)))(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.1:4242"
	w := &discard{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, req)
	})
	assert.Equal(t, http.StatusOK, w.code)
	assert.Equal(t, 10.0, allocs)
}
