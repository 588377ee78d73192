// Command fiber is an example API limited with fiberrl: a global per-IP
// limit, a strict login limit in wait mode, a per-user limit, and a limit
// of the exports each user runs at once.
//
//	go run ./examples/fiber
//	REDIS_URL=redis://localhost:6379 INSTANCES=2 ADDR=127.0.0.1:8081 go run ./examples/fiber
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
	"os"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/embedded"
	"github.com/redlimit/redlimit/fiberrl"
	"github.com/redlimit/redlimit/internal/redisurl"
	"github.com/redlimit/redlimit/policy"
)

// The demo's stand-in for authentication: the user named by the X-User
// header, kept in fiber's Locals under "user". A real service takes the
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

	app := newApp(client, instances)
	addr := cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080")
	ln, err := net.Listen("tcp", addr) // bound before the banner says so
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf(`fiber example listening on http://%[1]s
  GET  /        10 requests per 10 s per client IP
  POST /login   also 1 per 2 s per IP; waits up to 3 s for a permit
  GET  /me      also 5 per minute per user (send X-User: alice)
  GET  /export  also at most 2 at once per user (send X-User: alice)
  GET  /health  not limited
Try: for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code}\n' http://%[1]s/; done
`, addr)
	log.Fatal(app.Listener(ln))
}

// newApp returns the API, limited by policies on client that instances
// processes share.
func newApp(client *core.Client, instances int) *fiber.App {
	share := policy.WithFailLocal(instances)
	// Every route but /health: 10 requests per 10 s per client IP.
	global := policy.MustNew(client, "global", core.Rate{Permits: 10, Interval: 10 * time.Second}, share)
	// POST /login: also 1 per 2 s per IP; a request over it waits up to 3 s
	// for a permit before it is refused.
	login := policy.MustNew(client, "login", core.Rate{Permits: 1, Interval: 2 * time.Second},
		policy.WithWait(3*time.Second), share)
	// The per-user limits key on the user, read from fiber's Locals, where
	// authenticate put it.
	byUser := policy.WithKey(fiberrl.Key(func(c *fiber.Ctx) (string, error) {
		user, _ := c.Locals(userKey).(string)
		return user, nil
	}))
	// GET /me: also 5 per minute per user.
	perUser := policy.MustNew(client, "user", core.PerMinute(5), byUser, share)
	// GET /export: also at most 2 exports in flight at once per user. An
	// export takes one of its user's 2 slots before its handler runs and
	// gives it back when the handler returns; a third is refused at once
	// with a 429 and no Retry-After, since when a slot frees is not known.
	exports := policy.MustNewConcurrency(client, "exports", 2, byUser, share)

	app := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		// The timeouts of a server open to clients: without them, a slow or
		// idle client holds its connection, and its memory, for as long as
		// it likes. A client has 10 s to send a request; the answer is
		// written within 15 s once the handler returns; a keep-alive
		// connection is closed after a minute without a request.
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 15 * time.Second,
		IdleTimeout:  time.Minute,
	})
	app.Use(fiberrl.New(global, fiberrl.WithSkip(func(c *fiber.Ctx) bool { return c.Path() == "/health" })))
	app.Get("/", func(c *fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "hello")
		return err
	})
	// Route middleware runs in the order given: the limit, then the handler.
	app.Post("/login", fiberrl.New(login), func(c *fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "logged in")
		return err
	})
	app.Get("/me", authenticate, fiberrl.New(perUser), func(c *fiber.Ctx) error {
		_, err := fmt.Fprintf(c, "hello, %s\n", c.Locals(userKey))
		return err
	})
	app.Get("/export", authenticate, fiberrl.New(exports), func(c *fiber.Ctx) error {
		// The export's work, which holds the slot: exportTime, or less if
		// the request's context is done. fasthttp sees no disconnects: that
		// context ends only with a deadline a middleware sets.
		select {
		case <-time.After(exportTime):
		case <-c.UserContext().Done():
			return c.UserContext().Err()
		}
		_, err := fmt.Fprintf(c, "export of %s done\n", c.Locals(userKey))
		return err
	})
	app.Get("/health", func(c *fiber.Ctx) error {
		_, err := fmt.Fprintln(c, "ok")
		return err
	})
	return app
}

// authenticate is the demo's stand-in for real authentication: it takes
// the user from a header.
func authenticate(c *fiber.Ctx) error {
	user := c.Get(userHeader)
	if user == "" {
		return c.Status(fiber.StatusUnauthorized).SendString("send " + userHeader + "\n")
	}
	// c.Get returns a view into fasthttp's buffer: store a copy.
	c.Locals(userKey, utils.CopyString(user))
	return c.Next()
}
