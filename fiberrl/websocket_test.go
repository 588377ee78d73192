package fiberrl_test

import (
	"net"
	"testing"

	"github.com/fasthttp/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/fiberrl"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/policy"
)

// A WebSocket connection holds its slot of a concurrency limit until it
// closes, though fasthttp serves it after the handler returned.
func TestWebSocketHoldsItsSlot(t *testing.T) {
	conformance.RunWebSocket(t, func(t *testing.T, p, q *policy.Policy) string {
		f := fiber.New(fiber.Config{DisableStartupMessage: true})
		f.Get("/ws", fiberrl.New(p), fiberrl.New(q), func(c *fiber.Ctx) error {
			return (&websocket.FastHTTPUpgrader{}).Upgrade(c.Context(), func(conn *websocket.Conn) {
				defer conn.Close()
				for {
					kind, msg, err := conn.ReadMessage()
					if err != nil || conn.WriteMessage(kind, msg) != nil {
						return
					}
				}
			})
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = f.Listener(ln) }()
		t.Cleanup(func() { _ = f.Shutdown() })
		return "ws://" + ln.Addr().String() + "/ws"
	})
}
