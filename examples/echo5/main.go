// Command echo5 is an example API limited with echo5rl (Echo v5): a global
// per-IP limit, a strict login limit in wait mode, and a per-user limit.
package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/redlimit/redlimit/echo5rl"
	"github.com/redlimit/redlimit/examples/internal/demo"
)

func main() {
	client, stop := demo.Client()
	defer stop()

	// The per-user key is read from echo's context, where authenticate put
	// the user.
	p := demo.NewPolicies(client, echo5rl.Key(func(c *echo.Context) (string, error) {
		user, _ := c.Get(demo.UserKey).(string)
		return user, nil
	}))
	perIP := echo5rl.New(p.Global, echo5rl.WithSkip(func(c *echo.Context) bool { return c.Request().URL.Path == "/health" }))
	login, perUser := echo5rl.New(p.Login), echo5rl.New(p.PerUser)

	e := echo.New()
	e.Use(perIP)
	e.GET("/", func(c *echo.Context) error {
		return c.String(http.StatusOK, "hello\n")
	})
	e.POST("/login", func(c *echo.Context) error {
		return c.String(http.StatusOK, "logged in\n")
	}, login)
	e.GET("/me", func(c *echo.Context) error {
		return c.String(http.StatusOK, fmt.Sprintf("hello, %s\n", c.Get(demo.UserKey)))
	}, authenticate, perUser)
	e.GET("/health", func(c *echo.Context) error {
		return c.String(http.StatusOK, "ok\n")
	})

	demo.Banner("echo v5")
	srv := &http.Server{Addr: demo.Addr(), Handler: e, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// authenticate is the demo's stand-in for real authentication: it takes
// the user from a header.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		user := c.Request().Header.Get(demo.UserHeader)
		if user == "" {
			return echo.NewHTTPError(http.StatusUnauthorized, "send "+demo.UserHeader)
		}
		c.Set(demo.UserKey, user)
		return next(c)
	}
}
