package ginrl_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/ginrl"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/policy"
)

// A WebSocket connection holds its slot of a concurrency limit until it
// closes.
func TestWebSocketHoldsItsSlot(t *testing.T) {
	conformance.RunWebSocket(t, func(t *testing.T, p, q *policy.Policy) string {
		r := gin.New()
		r.GET("/ws", ginrl.New(p), ginrl.New(q), func(c *gin.Context) { conformance.EchoWebSocket(c.Writer, c.Request) })
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
	})
}
