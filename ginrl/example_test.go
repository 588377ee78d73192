package ginrl_test

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginrl"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// A global per-IP limit, a strict login limit in wait mode, and a per-user
// limit on the routes behind authentication.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	client, err := core.New(rdb)
	if err != nil {
		panic(err)
	}
	global := policy.MustNew(client, "global", core.PerMinute(100))
	// At most one login per 2 s per IP; a second waits up to 3 s for its turn.
	login := policy.MustNew(client, "login", core.Rate{Permits: 1, Interval: 2 * time.Second},
		policy.WithWait(3*time.Second))
	// Per user: the authentication middleware stores the user with c.Set.
	perUser := policy.MustNew(client, "user", core.PerMinute(5), policy.WithKey(keyfunc.User("user")))

	engine := gin.New()
	engine.Use(ginrl.New(global, ginrl.WithSkip(func(c *gin.Context) bool { return c.Request.URL.Path == "/health" })))
	engine.POST("/login", ginrl.New(login), func(c *gin.Context) { c.String(http.StatusOK, "logged in") })
	api := engine.Group("/api", func(c *gin.Context) { c.Set("user", "alice") }, ginrl.New(perUser))
	api.GET("/me", func(c *gin.Context) { c.String(http.StatusOK, "hello, %s", c.GetString("user")) })

	_ = engine.Run(":8080")
}
