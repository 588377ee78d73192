// Command fiber is an example API limited with fiberrl: a global per-IP
// limit, a strict login limit in wait mode, and a per-user limit.
package main

import (
	"fmt"
	"log"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/fiberrl"
)

func main() {
	client, stop := demo.Client()
	defer stop()

	// The per-user key is read from fiber's Locals, where authenticate put
	// the user.
	p := demo.NewPolicies(client, fiberrl.Key(func(c *fiber.Ctx) (string, error) {
		user, _ := c.Locals(demo.UserKey).(string)
		return user, nil
	}))
	perIP := fiberrl.New(p.Global, fiberrl.WithSkip(func(c *fiber.Ctx) bool { return c.Path() == "/health" }))
	login, perUser := fiberrl.New(p.Login), fiberrl.New(p.PerUser)

	app := fiber.New(fiber.Config{DisableStartupMessage: true, ReadTimeout: 5 * time.Second})
	app.Use(perIP)
	app.Get("/", func(c *fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "hello")
		return err
	})
	app.Post("/login", login, func(c *fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "logged in")
		return err
	})
	app.Get("/me", authenticate, perUser, func(c *fiber.Ctx) error {
		_, err := fmt.Fprintf(c, "hello, %s\n", c.Locals(demo.UserKey))
		return err
	})
	app.Get("/health", func(c *fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "ok")
		return err
	})

	demo.Banner("fiber")
	log.Fatal(app.Listen(demo.Addr()))
}

// authenticate is the demo's stand-in for real authentication: it takes
// the user from a header.
func authenticate(c *fiber.Ctx) error {
	user := c.Get(demo.UserHeader)
	if user == "" {
		return c.Status(fiber.StatusUnauthorized).SendString("send " + demo.UserHeader + "\n")
	}
	// c.Get returns a view into fasthttp's buffer: store a copy.
	c.Locals(demo.UserKey, utils.CopyString(user))
	return c.Next()
}
