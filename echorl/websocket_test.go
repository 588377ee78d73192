package echorl_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit/echorl"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/policy"
)

// A WebSocket connection holds its slot of a concurrency limit until it
// closes.
func TestWebSocketHoldsItsSlot(t *testing.T) {
	conformance.RunWebSocket(t, func(t *testing.T, p, q *policy.Policy) string {
		e := echo.New()
		e.GET("/ws", func(c echo.Context) error {
			conformance.EchoWebSocket(c.Response(), c.Request())
			return nil
		}, echorl.New(p), echorl.New(q))
		srv := httptest.NewServer(e)
		t.Cleanup(srv.Close)
		return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
	})
}
