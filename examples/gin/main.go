// Command gin is an example API limited with ginrl: a global per-IP limit,
// a strict login limit in wait mode, and a per-user limit.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/ginrl"
)

func main() {
	client, stop := demo.Client()
	defer stop()

	// The per-user key is read from gin's context, where authenticate put
	// the user.
	p := demo.NewPolicies(client, ginrl.Key(func(c *gin.Context) (string, error) { return c.GetString(demo.UserKey), nil }))
	perIP := ginrl.New(p.Global, ginrl.WithSkip(func(c *gin.Context) bool { return c.Request.URL.Path == "/health" }))
	login, perUser := ginrl.New(p.Login), ginrl.New(p.PerUser)

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
