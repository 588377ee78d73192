package echo5rl_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echo5rl"
	"github.com/redlimit/redlimit/policy"
)

// The example runs on an embedded Redis (miniredis), so that it needs no
// server; a service gives core.New a go-redis client of its Redis, with
// ContextTimeoutEnabled (see package core).
func exampleClient() (*core.Client, *miniredis.Miniredis) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}))
	if err != nil {
		panic(err)
	}
	return client, mr
}

// send sends n requests from 192.0.2.1 and returns their statuses in runs:
// "5 x 200, 1 x 429".
func send(h http.Handler, method, path string, n int) string {
	var runs []string
	last, count := 0, 0
	for i := 0; i <= n; i++ {
		status := 0
		if i < n {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
			status = w.Code
		}
		if status != last && count > 0 {
			runs = append(runs, fmt.Sprintf("%d x %d", count, last))
			count = 0
		}
		last = status
		count++
	}
	return strings.Join(runs, ", ")
}

func handleLogin(c *echo.Context) error { return c.String(http.StatusOK, "logged in") }

func handleHome(c *echo.Context) error { return c.String(http.StatusOK, "hello") }

// A limit per client IP on every route, and a login limit on top of it that
// may wait up to 3 s for a permit. The sixth login of a minute is refused at
// once, since its permit comes back only a minute after the first; the five
// served logins count against the global limit too, and the refused one
// takes nothing from it. Refusals are returned to Echo's HTTPErrorHandler
// as errors that carry their status (echo.StatusCode).
func Example() {
	client, mr := exampleClient()
	defer mr.Close()

	global := policy.MustNew(client, "global", core.PerMinute(100)) // per client IP
	login := policy.MustNew(client, "login", core.PerMinute(5), policy.WithWait(3*time.Second))

	e := echo.New()
	e.Use(echo5rl.New(global))
	e.POST("/login", handleLogin, echo5rl.New(login))

	e.GET("/", handleHome)
	fmt.Println("POST /login:", send(e, http.MethodPost, "/login", 6))
	fmt.Println("GET /:", send(e, http.MethodGet, "/", 100))
	// Output:
	// POST /login: 5 x 200, 1 x 429
	// GET /: 95 x 200, 5 x 429
}
