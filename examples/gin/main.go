// Command gin is an example API limited with ginrl: a global per-IP limit,
// a strict login limit in wait mode, and a per-user limit.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/ginrl"
)

func main() {
	client, stop := demo.Client()
	defer stop()

	perIP := ginrl.New(client, core.Rate{Permits: 10, Interval: 10 * time.Second},
		ginrl.WithName("global"),
		ginrl.WithSkip(func(c *gin.Context) bool { return c.Request.URL.Path == "/health" }))
	login := ginrl.New(client, core.Rate{Permits: 1, Interval: 2 * time.Second},
		ginrl.WithName("login"), ginrl.WithWait(3*time.Second))
	// The key is read from gin's context, where authenticate put the user.
	perUser := ginrl.New(client, core.PerMinute(5), ginrl.WithName("user"),
		ginrl.WithKey(ginrl.Key(func(c *gin.Context) (string, error) { return c.GetString(demo.UserKey), nil })))

	engine := gin.New()
	engine.Use(gin.Logger(), gin.Recovery(), perIP)
	engine.GET("/", func(c *gin.Context) {
		c.String(http.StatusOK, "hello\n")
	})
	engine.POST("/login", login, func(c *gin.Context) {
		c.String(http.StatusOK, "logged in\n")
	})
	engine.GET("/me", authenticate, perUser, func(c *gin.Context) {
		c.String(http.StatusOK, "hello, %s\n", c.GetString(demo.UserKey))
	})
	engine.GET("/health", func(c *gin.Context) {
		c.String(http.StatusOK, "ok\n")
	})

	demo.Banner("gin")
	srv := &http.Server{Addr: demo.Addr(), Handler: engine, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// authenticate is the demo's stand-in for real authentication: it takes
// the user from a header.
func authenticate(c *gin.Context) {
	user := c.GetHeader(demo.UserHeader)
	if user == "" {
		c.String(http.StatusUnauthorized, "send "+demo.UserHeader+"\n")
		c.Abort()
		return
	}
	c.Set(demo.UserKey, user)
}
