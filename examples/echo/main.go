// Command echo is an example API limited with echorl: a global per-IP
// limit, a strict login limit in wait mode, and a per-user limit.
package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit/echorl"
	"github.com/redlimit/redlimit/examples/internal/demo"
)

func main() {
	client, stop := demo.Client()
	defer stop()

	// The per-user key is read from echo's context, where authenticate put
	// the user.
	p := demo.NewPolicies(client, echorl.Key(func(c echo.Context) (string, error) {
		user, _ := c.Get(demo.UserKey).(string)
		return user, nil
	}))
	perIP := echorl.New(p.Global, echorl.WithSkip(func(c echo.Context) bool { return c.Request().URL.Path == "/health" }))
	login, perUser := echorl.New(p.Login), echorl.New(p.PerUser)

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(perIP)
	e.GET("/", func(c echo.Context) error {
		return c.String(http.StatusOK, "hello\n")
	})
	e.POST("/login", func(c echo.Context) error {
		return c.String(http.StatusOK, "logged in\n")
	}, login)
	e.GET("/me", func(c echo.Context) error {
		return c.String(http.StatusOK, fmt.Sprintf("hello, %s\n", c.Get(demo.UserKey)))
	}, authenticate, perUser)
	e.GET("/health", func(c echo.Context) error {
		return c.String(http.StatusOK, "ok\n")
	})

	demo.Banner("echo")
	e.Server.ReadHeaderTimeout = 5 * time.Second
	log.Fatal(e.Start(demo.Addr()))
}

// authenticate is the demo's stand-in for real authentication: it takes
// the user from a header.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		user := c.Request().Header.Get(demo.UserHeader)
		if user == "" {
			return echo.NewHTTPError(http.StatusUnauthorized, "send "+demo.UserHeader)
		}
		c.Set(demo.UserKey, user)
		return next(c)
	}
}
