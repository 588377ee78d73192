package ginrl_test

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginrl"
	"github.com/redlimit/redlimit/keyfunc"
)

// A global per-IP limit, a strict login limit in wait mode, and a per-user
// limit on the routes behind authentication.
func Example() {
	client, err := core.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		panic(err)
	}
	engine := gin.New()
	engine.Use(ginrl.New(client, core.PerMinute(100), ginrl.WithName("global"),
		ginrl.WithSkip(func(c *gin.Context) bool { return c.Request.URL.Path == "/health" })))

	// At most one login per 2 s per IP; a second waits up to 3 s for its turn.
	engine.POST("/login",
		ginrl.New(client, core.Rate{Permits: 1, Interval: 2 * time.Second},
			ginrl.WithName("login"), ginrl.WithWait(3*time.Second)),
		func(c *gin.Context) { c.String(http.StatusOK, "logged in") })

	// Per user: the authentication middleware stores the user with c.Set.
	api := engine.Group("/api", func(c *gin.Context) { c.Set("user", "alice") })
	api.Use(ginrl.New(client, core.PerMinute(5), ginrl.WithName("user"),
		ginrl.WithKey(keyfunc.User("user"))))
	api.GET("/me", func(c *gin.Context) { c.String(http.StatusOK, "hello, %s", c.GetString("user")) })

	_ = engine.Run(":8080")
}
