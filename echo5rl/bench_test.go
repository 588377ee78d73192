package echo5rl_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echo5rl"
	"github.com/redlimit/redlimit/internal/testkit/memredis"
	"github.com/redlimit/redlimit/policy"
)

// BenchmarkMiddleware measures one request through echo with and without the
// middleware, on a core that answers from memory (internal/memredis), and
// the core decision alone: the middleware's own cost is "limited" less
// "bare" less "core".
func BenchmarkMiddleware(b *testing.B) {
	rate := core.PerMinute(1_000_000)
	ok := func(c *echo.Context) error { return c.String(http.StatusOK, "ok") }
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
		e := echo.New()
		e.GET("/", ok)
		serve(b, e)
	})
	b.Run("limited", func(b *testing.B) {
		client, err := core.New(memredis.New())
		if err != nil {
			b.Fatal(err)
		}
		e := echo.New()
		e.Use(echo5rl.New(policy.MustNew(client, "bench", rate, policy.WithTimeout(10*time.Second))))
		e.GET("/", ok)
		serve(b, e)
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
