package fiberrl_test

import (
	"context"
	"log"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiberrl"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	client, err := core.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()

	// Bound every request, and so every wait, by a deadline: fasthttp
	// cannot tell that a client went away.
	app.Use(func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), 10*time.Second)
		defer cancel()
		c.SetUserContext(ctx)
		return c.Next()
	})

	// Global: 100 requests a minute per client IP, except health checks.
	global := policy.MustNew(client, "global", core.PerMinute(100))
	app.Use(fiberrl.New(global, fiberrl.WithSkip(func(c *fiber.Ctx) bool { return c.Path() == "/health" })))

	// Per route: one login attempt per 2 s per IP, waiting up to 3 s for it.
	login := policy.MustNew(client, "login", core.Rate{Permits: 1, Interval: 2 * time.Second}, policy.WithWait(3*time.Second))
	app.Post("/login", fiberrl.New(login), func(c *fiber.Ctx) error { return c.SendString("logged in") })

	// Per user: after authentication stored the user with c.Locals.
	authenticate := func(c *fiber.Ctx) error {
		user := c.Get("X-User") // stand-in for real authentication
		if user == "" {
			return fiber.ErrUnauthorized
		}
		c.Locals("user", utils.CopyString(user))
		return c.Next()
	}
	perUser := policy.MustNew(client, "user", core.PerMinute(5), policy.WithKey(keyfunc.User("user")))
	app.Get("/me", authenticate, fiberrl.New(perUser), func(c *fiber.Ctx) error {
		return c.SendString("hello, " + c.Locals("user").(string))
	})

	log.Fatal(app.Listen(":8080"))
}
