// Command gin is an example API limited with ginrl: a global per-IP limit,
// a strict login limit in wait mode, a per-user limit, and a limit of the
// exports each user runs at once.
//
//	go run ./examples/gin
//	REDIS_URL=redis://localhost:6379 INSTANCES=2 ADDR=127.0.0.1:8081 go run ./examples/gin
//
// It takes its Redis from REDIS_URL (an embedded one when unset), its
// address from ADDR (127.0.0.1:8080), and the number of processes that
// share its limits from INSTANCES (1).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/embedded"
	"github.com/redlimit/redlimit/ginrl"
	"github.com/redlimit/redlimit/internal/redisurl"
	"github.com/redlimit/redlimit/policy"
)

// The demo's stand-in for authentication: the user named by the X-User
// header, kept in gin's context under "user". A real service takes the
// user from its session or token middleware.
const (
	userHeader = "X-User"
	userKey    = "user"
)

// exportTime is how long the demo's export works: long enough to send a
// third one while two run.
const exportTime = 2 * time.Second

func main() {
	// Redis is at REDIS_URL, such as redis://user:password@host:6379/0.
	// Without it, the demo starts an embedded Redis in this process; a
	// service would require REDIS_URL instead.
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		addr, stop, err := embedded.Start()
		if err != nil {
			log.Fatalf("embedded Redis: %v", err)
		}
		defer stop()
		redisURL = "redis://" + addr
		log.Print(embedded.Notice)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		// The error may quote the URL, password and all: say what is wrong
		// without it.
		log.Fatalf("REDIS_URL: %v", redisurl.Redact(err, redisURL))
	}
	// Each round trip stops at its decision's deadline (100 ms by default),
	// not at go-redis's 3 s ReadTimeout.
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	log.Printf("using Redis at %s", opts.Addr) // the address alone: the URL may hold a password

	client, err := core.New(rdb, core.WithKeyPrefix("example:"))
	if err != nil {
		log.Fatal(err)
	}
	// Check tells at start what keeps Redis from deciding, if anything. The
	// service starts all the same: its limits decide in memory, at this
	// instance's share, until Redis answers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Check(ctx); err != nil {
		log.Printf("redis check: %v: limiting in memory at this instance's share until Redis answers", err)
	} else {
		log.Printf("redis check: ok")
	}

	// INSTANCES is how many processes share the limits: while Redis cannot
	// decide, each one limits in memory at its share of the rate.
	instances := 1
	if n, err := strconv.Atoi(os.Getenv("INSTANCES")); err == nil && n > 0 {
		instances = n
	}

	srv := newServer(cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080"), newHandler(client, instances))
	ln, err := net.Listen("tcp", srv.Addr) // bound before the banner says so
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf(`gin example listening on http://%[1]s
  GET  /        10 requests per 10 s per client IP
  POST /login   also 1 per 2 s per IP; waits up to 3 s for a permit
  GET  /me      also 5 per minute per user (send X-User: alice)
  GET  /export  also at most 2 at once per user (send X-User: alice)
  GET  /health  not limited
Try: for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code}\n' http://%[1]s/; done
`, srv.Addr)
	log.Fatal(srv.Serve(ln))
}

// newHandler returns the API, limited by policies on client that instances
// processes share.
func newHandler(client *core.Client, instances int) http.Handler {
	share := policy.WithFailLocal(instances)
	// Every route but /health: 10 requests per 10 s per client IP.
	global := policy.MustNew(client, "global", core.Rate{Permits: 10, Interval: 10 * time.Second}, share)
	// POST /login: also 1 per 2 s per IP; a request over it waits up to 3 s
	// for a permit before it is refused.
	login := policy.MustNew(client, "login", core.Rate{Permits: 1, Interval: 2 * time.Second},
		policy.WithWait(3*time.Second), share)
	// The per-user limits key on the user, read from gin's context, where
	// authenticate put it.
	byUser := policy.WithKey(ginrl.Key(func(c *gin.Context) (string, error) { return c.GetString(userKey), nil }))
	// GET /me: also 5 per minute per user.
	perUser := policy.MustNew(client, "user", core.PerMinute(5), byUser, share)
	// GET /export: also at most 2 exports in flight at once per user. An
	// export takes one of its user's 2 slots before its handler runs and
	// gives it back when the handler returns; a third is refused at once
	// with a 429 and no Retry-After, since when a slot frees is not known.
	exports := policy.MustNewConcurrency(client, "exports", 2, byUser, share)

	engine := gin.New()
	engine.Use(gin.Logger(), gin.Recovery(),
		ginrl.New(global, ginrl.WithSkip(func(c *gin.Context) bool { return c.Request.URL.Path == "/health" })))
	engine.GET("/", func(c *gin.Context) {
		c.String(http.StatusOK, "hello\n")
	})
	engine.POST("/login", ginrl.New(login), func(c *gin.Context) {
		c.String(http.StatusOK, "logged in\n")
	})
	engine.GET("/me", authenticate, ginrl.New(perUser), func(c *gin.Context) {
		c.String(http.StatusOK, "hello, %s\n", c.GetString(userKey))
	})
	engine.GET("/export", authenticate, ginrl.New(exports), func(c *gin.Context) {
		// The export's work, which holds the slot: exportTime, or less if
		// the client goes away (the request's context is done).
		select {
		case <-time.After(exportTime):
		case <-c.Request.Context().Done():
			return // nobody is left to read an answer
		}
		c.String(http.StatusOK, "export of %s done\n", c.GetString(userKey))
	})
	engine.GET("/health", func(c *gin.Context) {
		c.String(http.StatusOK, "ok\n")
	})
	return engine
}

// newServer returns the server of h on addr, with the timeouts of a server
// open to clients: without them, a slow or idle client holds its
// connection, and its memory, for as long as it likes.
func newServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:    addr,
		Handler: h,
		// A client has 5 s to send a request's header, 10 s for all of it.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// The answer is written within 15 s of the request's header: time
		// for the login limit's wait of up to 3 s, and the handler's work,
		// such as an export's 2 s.
		WriteTimeout: 15 * time.Second,
		// A keep-alive connection is closed after a minute without a request.
		IdleTimeout: time.Minute,
	}
}

// authenticate is the demo's stand-in for real authentication: it takes
// the user from a header.
func authenticate(c *gin.Context) {
	user := c.GetHeader(userHeader)
	if user == "" {
		c.String(http.StatusUnauthorized, "send "+userHeader+"\n")
		c.Abort()
		return
	}
	c.Set(userKey, user)
}
