package nethttprl_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// A WebSocket connection holds its slot of a concurrency limit until it
// closes, through a ServeMux and through chi.
func TestWebSocketHoldsItsSlot(t *testing.T) {
	t.Run("ServeMux", func(t *testing.T) {
		conformance.RunWebSocket(t, func(t *testing.T, p, q *policy.Policy) string {
			mux := http.NewServeMux()
			mux.Handle("GET /ws", nethttprl.New(p)(nethttprl.New(q)(http.HandlerFunc(conformance.EchoWebSocket))))
			return wsURL(t, mux)
		})
	})
	t.Run("chi", func(t *testing.T) {
		conformance.RunWebSocket(t, func(t *testing.T, p, q *policy.Policy) string {
			r := chi.NewRouter()
			r.Use(nethttprl.New(p), nethttprl.New(q))
			r.Get("/ws", conformance.EchoWebSocket)
			return wsURL(t, r)
		})
	})
}

// wsURL serves h and returns the URL of its route /ws.
func wsURL(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
}
