package fiber3rl_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gofiber/fiber/v3"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiber3rl"
	"github.com/redlimit/redlimit/policy"
)

// The examples run on an embedded Redis (miniredis), so that they need no
// server; a service gives core.New a go-redis client of its Redis, with
// ContextTimeoutEnabled (see package core).
func exampleClient() (*core.Client, *miniredis.Miniredis) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}))
	if err != nil {
		panic(err)
	}
	return client, mr
}

// send sends n requests through app and returns their statuses in runs:
// "5 x 200, 1 x 429".
func send(app *fiber.App, method, path string, n int) string {
	var runs []string
	last, count := 0, 0
	for i := 0; i <= n; i++ {
		status := 0
		if i < n {
			resp, err := app.Test(httptest.NewRequest(method, path, nil), fiber.TestConfig{})
			if err != nil {
				panic(err)
			}
			_ = resp.Body.Close()
			status = resp.StatusCode
		}
		if status != last && count > 0 {
			runs = append(runs, fmt.Sprintf("%d x %d", count, last))
			count = 0
		}
		last = status
		count++
	}
	return strings.Join(runs, ", ")
}

func handleLogin(c fiber.Ctx) error { return c.SendString("logged in") }

func handleHome(c fiber.Ctx) error { return c.SendString("hello") }

// A limit per client IP on every route, and a login limit on top of it that
// may wait up to 3 s for a permit. The sixth login of a minute is refused at
// once, since its permit comes back only a minute after the first; the five
// served logins count against the global limit too, and the refused one
// takes nothing from it.
func Example() {
	client, mr := exampleClient()
	defer mr.Close()

	global := policy.MustNew(client, "global", core.PerMinute(100)) // per client IP
	login := policy.MustNew(client, "login", core.PerMinute(5), policy.WithWait(3*time.Second))

	app := fiber.New()
	app.Use(fiber3rl.New(global))
	app.Post("/login", fiber3rl.New(login), handleLogin)

	app.Get("/", handleHome)
	fmt.Println("POST /login:", send(app, fiber.MethodPost, "/login", 6))
	fmt.Println("GET /:", send(app, fiber.MethodGet, "/", 100))
	// Output:
	// POST /login: 5 x 200, 1 x 429
	// GET /: 95 x 200, 5 x 429
}

// Fasthttp cannot tell that a client went away, so a request waiting for a
// permit (policy.WithWait) waits out its maximum wait even then: bound every
// request by a deadline in a middleware before the limits.
func Example_deadline() {
	client, mr := exampleClient()
	defer mr.Close()

	app := fiber.New()
	app.Use(func(c fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.Context(), 10*time.Second)
		defer cancel()
		c.SetContext(ctx)
		return c.Next()
	})
	login := policy.MustNew(client, "login", core.Rate{Permits: 1, Interval: 2 * time.Second}, policy.WithWait(3*time.Second))
	app.Post("/login", fiber3rl.New(login), handleLogin)

	fmt.Println("POST /login:", send(app, fiber.MethodPost, "/login", 1))
	// Output:
	// POST /login: 1 x 200
}
