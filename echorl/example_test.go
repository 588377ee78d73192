package echorl_test

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echorl"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	client, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	// Global: 100 requests per minute per client IP. Login: one attempt per
	// 2 s per IP; a second attempt waits up to 3 s for its permit. Per
	// user: the authentication middleware stores the user with c.Set.
	global := policy.MustNew(client, "global", core.PerMinute(100))
	login := policy.MustNew(client, "login", core.Rate{Permits: 1, Interval: 2 * time.Second}, policy.WithWait(3*time.Second))
	perUser := policy.MustNew(client, "user", core.PerMinute(5), policy.WithKey(keyfunc.User("user")))

	e := echo.New()
	e.Use(echorl.New(global, echorl.WithSkip(func(c echo.Context) bool { return c.Path() == "/health" })))
	e.POST("/login", func(c echo.Context) error { return c.String(http.StatusOK, "logged in") }, echorl.New(login))
	e.GET("/me", func(c echo.Context) error { return c.String(http.StatusOK, "hello") }, authenticate, echorl.New(perUser))
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
