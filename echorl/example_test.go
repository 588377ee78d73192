package echorl_test

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echorl"
	"github.com/redlimit/redlimit/keyfunc"
)

func Example() {
	client, err := core.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		panic(err)
	}
	e := echo.New()

	// Global: 100 requests per minute per client IP, health checks exempt.
	e.Use(echorl.New(client, core.PerMinute(100),
		echorl.WithName("global"),
		echorl.WithSkip(func(c echo.Context) bool { return c.Path() == "/health" })))

	// Per route: one login attempt per 2 s per IP; a second attempt waits
	// up to 3 s for its permit instead of being rejected.
	e.POST("/login", func(c echo.Context) error { return c.String(http.StatusOK, "logged in") },
		echorl.New(client, core.Rate{Permits: 1, Interval: 2 * time.Second},
			echorl.WithName("login"), echorl.WithWait(3*time.Second)))

	// Per user: the authentication middleware stores the user with
	// c.Set("user", id); the limit keys on it.
	e.GET("/me", func(c echo.Context) error { return c.String(http.StatusOK, "hello") },
		authenticate,
		echorl.New(client, core.PerMinute(5),
			echorl.WithName("user"), echorl.WithKey(keyfunc.User("user"))))

	e.GET("/health", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	_ = e.Start("127.0.0.1:8080")
}

// authenticate stands in for real authentication.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		user := c.Request().Header.Get("X-User")
		if user == "" {
			return echo.ErrUnauthorized
		}
		c.Set("user", user)
		return next(c)
	}
}
