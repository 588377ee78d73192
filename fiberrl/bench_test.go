package fiberrl_test

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiberrl"
	"github.com/redlimit/redlimit/internal/testkit/memredis"
	"github.com/redlimit/redlimit/policy"
)

// BenchmarkMiddleware measures one request through fiber with and without
// the middleware, on a core that answers from memory (internal/memredis),
// and the core decision alone: the middleware's own cost is "limited" less
// "bare" less "core". The handler is driven with one reused
// fasthttp.RequestCtx, as fasthttp's server does.
func BenchmarkMiddleware(b *testing.B) {
	rate := core.PerMinute(1_000_000)
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	serve := func(b *testing.B, app *fiber.App) {
		h := app.Handler()
		c := &fasthttp.RequestCtx{}
		c.Request.Header.SetMethod(fasthttp.MethodGet)
		c.Request.SetRequestURI("/")
		c.SetRemoteAddr(&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4242})
		b.ReportAllocs()
		for b.Loop() {
			c.Response.Reset()
			c.ResetUserValues() // as fasthttp's server does between requests
			h(c)
			if c.Response.StatusCode() != fiber.StatusOK {
				b.Fatalf("status %d", c.Response.StatusCode())
			}
		}
	}
	b.Run("bare", func(b *testing.B) {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Get("/", ok)
		serve(b, app)
	})
	b.Run("limited", func(b *testing.B) {
		client, err := core.New(memredis.New())
		if err != nil {
			b.Fatal(err)
		}
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(fiberrl.New(policy.MustNew(client, "bench", rate, policy.WithTimeout(10*time.Second))))
		app.Get("/", ok)
		serve(b, app)
	})
	b.Run("core", func(b *testing.B) { memredis.Decide(b, "bench:192.0.2.1", rate) })
}
