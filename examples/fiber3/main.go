// Command fiber3 is an example API limited with fiber3rl (Fiber v3): a
// global per-IP limit, a strict login limit in wait mode, and a per-user
// limit.
package main

import (
	"fmt"
	"log"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/utils/v2"

	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/fiber3rl"
)

func main() {
	client, stop := demo.Client()
	defer stop()

	// The per-user key is read from fiber's Locals, where authenticate put
	// the user.
	p := demo.NewPolicies(client, fiber3rl.Key(func(c fiber.Ctx) (string, error) {
		user, _ := c.Locals(demo.UserKey).(string)
		return user, nil
	}))
	perIP := fiber3rl.New(p.Global, fiber3rl.WithSkip(func(c fiber.Ctx) bool { return c.Path() == "/health" }))
	login, perUser := fiber3rl.New(p.Login), fiber3rl.New(p.PerUser)

	app := fiber.New(fiber.Config{ReadTimeout: 5 * time.Second})
	app.Use(perIP)
	app.Get("/", func(c fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "hello")
		return err
	})
	// Route middleware runs in the order given: the limit, then the handler.
	app.Post("/login", login, func(c fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "logged in")
		return err
	})
	app.Get("/me", authenticate, perUser, func(c fiber.Ctx) error {
		_, err := fmt.Fprintf(c, "hello, %s\n", c.Locals(demo.UserKey))
		return err
	})
	app.Get("/health", func(c fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "ok")
		return err
	})

	demo.Banner("fiber v3")
	log.Fatal(app.Listen(demo.Addr(), fiber.ListenConfig{DisableStartupMessage: true}))
}

// authenticate is the demo's stand-in for real authentication: it takes
// the user from a header.
func authenticate(c fiber.Ctx) error {
	user := c.Get(demo.UserHeader)
	if user == "" {
		return c.Status(fiber.StatusUnauthorized).SendString("send " + demo.UserHeader + "\n")
	}
	// c.Get returns a view into fasthttp's buffer: store a copy.
	c.Locals(demo.UserKey, utils.CopyString(user))
	return c.Next()
}
