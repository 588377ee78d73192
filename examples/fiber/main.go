// Command fiber is an example API limited with fiberrl: a global per-IP
// limit, a strict login limit in wait mode, and a per-user limit.
package main

import (
	"fmt"
	"log"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/fiberrl"
)

func main() {
	client, stop := demo.Client()
	defer stop()

	perIP := fiberrl.New(client, core.Rate{Permits: 10, Interval: 10 * time.Second},
		fiberrl.WithName("global"),
		fiberrl.WithSkip(func(c *fiber.Ctx) bool { return c.Path() == "/health" }))
	login := fiberrl.New(client, core.Rate{Permits: 1, Interval: 2 * time.Second},
		fiberrl.WithName("login"), fiberrl.WithWait(3*time.Second))
	// The key is read from fiber's Locals, where authenticate put the user.
	perUser := fiberrl.New(client, core.PerMinute(5), fiberrl.WithName("user"),
		fiberrl.WithKey(fiberrl.Key(func(c *fiber.Ctx) (string, error) {
			user, _ := c.Locals(demo.UserKey).(string)
			return user, nil
		})))

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
