package fiber3rl_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	recoverer "github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/gofiber/utils/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiber3rl"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// userKey is where the pre-middleware stores X-User, in c.Locals.
const userKey = "user"

// adapter is how the conformance tables drive this package.
var adapter = conformance.Adapter{
	Name:    "fiber3rl",
	Serve:   serve,
	UserKey: userKey,
	// app.Test serves a connection whose remote address is 0.0.0.0:0.
	Peer:        netip.MustParseAddr("0.0.0.0"),
	Disconnects: false,
	Key: func(param string) keyfunc.KeyFunc {
		return fiber3rl.Key(func(c fiber.Ctx) (string, error) { return c.Params(param), nil })
	},
	Rate: func(l conformance.Limit) policy.RateFunc {
		return fiber3rl.RateFunc(func(c fiber.Ctx) (core.Rate, error) { return l.TierRate(header(c)) })
	},
	Cost: func() policy.CostFunc {
		return fiber3rl.CostFunc(func(c fiber.Ctx) (int64, error) { return conformance.Cost(header(c)) })
	},
	ProblemContentType: policy.ProblemContentType,
	RoutesInGlobal:     false,
}

func TestConformance(t *testing.T) { conformance.Run(t, adapter) }

// TestConformanceCluster runs the same table on Redis Cluster: 3 masters
// with a replica each, and, for the failure cases, a master that the case
// stops (see conformance.RunCluster).
func TestConformanceCluster(t *testing.T) { conformance.RunCluster(t, adapter) }

func TestHostileInput(t *testing.T) { conformance.RunHostile(t, adapter) }

// TestHostileInputDefaultReadBuffer runs the hostile table on fiber's
// default read buffer (4 KiB): fasthttp refuses by itself the requests
// whose headers do not fit in it, before any handler runs. Through
// app.Test that refusal is an error ("small read buffer"), not a response:
// status -1 in the table.
func TestHostileInputDefaultReadBuffer(t *testing.T) {
	a := adapter
	a.Serve = serveWith(0)
	a.HostileRefused = map[string]int{}
	for _, name := range []string{
		"64 KiB X-Forwarded-For", "1 000 X-Forwarded-For hops", "64 KiB X-Forwarded-For from an untrusted peer",
		"64 KiB user id", "64 KiB API key",
	} {
		a.HostileRefused[name] = -1
	}
	conformance.RunHostile(t, a)
}

// TestBurst: 6 000 concurrent requests on a wait-mode login limit do not
// turn it off (see conformance.RunBurst). The fiber app runs in this
// process behind Fiber's net/http adaptor, which gives it each request's
// RemoteAddr as the peer.
func TestBurst(t *testing.T) {
	conformance.RunBurst(t, func(ps []*policy.Policy, onError func(string)) http.Handler {
		app := fiber.New()
		var handlers []any
		for _, p := range ps {
			handlers = append(handlers, fiber3rl.New(p, fiber3rl.WithErrorHandler(func(c fiber.Ctx, _ error) error {
				onError(c.RequestCtx().RemoteAddr().String())
				return nil
			})))
		}
		handlers = append(handlers, func(c fiber.Ctx) error { return c.SendString("logged in") })
		app.Post("/login", handlers[0], handlers[1:]...)
		return adaptor.FiberApp(app)
	})
}

// serve serves an App with a read buffer large enough for the hostile
// table's 64 KiB headers to reach the middleware.
var serve = serveWith(256 << 10)

// serveWith returns a Serve whose fiber app has a read buffer of
// readBuffer bytes (0: fasthttp's default, 4 KiB).
func serveWith(readBuffer int) func(*testing.T, conformance.App) func(*http.Request) (*http.Response, error) {
	return func(_ *testing.T, app conformance.App) func(*http.Request) (*http.Response, error) {
		return serveApp(app, readBuffer)
	}
}

func serveApp(app conformance.App, readBuffer int) func(*http.Request) (*http.Response, error) {
	f := fiber.New(fiber.Config{ReadBufferSize: readBuffer})
	f.Use(recoverer.New()) // a handler's panic is a 500 (HeaderPanic)
	f.Use(func(c fiber.Ctx) error {
		ctx, cancel := conformance.Controls(c.Context(), header(c))
		defer cancel()
		c.SetContext(ctx)
		if u := conformance.UserOf(header(c)); u != "" {
			c.Locals(userKey, utils.CopyString(u))
		}
		return c.Next()
	})
	for _, l := range app.Global {
		f.Use(fiber3rl.New(app.Policy(l), options(app, l)...))
	}
	for _, r := range app.Routes {
		chain := make([]any, 0, len(r.Limits)+1)
		for _, l := range r.Limits {
			chain = append(chain, fiber3rl.New(app.Policy(l), options(app, l)...))
		}
		chain = append(chain, func(c fiber.Ctx) error {
			c.Set(conformance.HeaderResult, conformance.ResultValue(fiber3rl.ResultFrom(c)))
			return c.Status(app.Status(c.Context(), header(c))).SendString("ok")
		})
		f.Get(fiberPath(r.Path), chain[0], chain[1:]...)
	}
	return func(req *http.Request) (*http.Response, error) { return f.Test(req, fiber.TestConfig{}) }
}

// fiberPath translates "/users/{id}" to "/users/:id".
func fiberPath(p string) string {
	p = strings.ReplaceAll(p, "{", ":")
	return strings.ReplaceAll(p, "}", "")
}

// options are the middleware's own options for l: skip, deny and error
// handlers.
func options(app conformance.App, l conformance.Limit) []fiber3rl.Option {
	var o []fiber3rl.Option
	if l.SkipPath != "" {
		o = append(o, fiber3rl.WithSkip(func(c fiber.Ctx) bool { return c.Path() == l.SkipPath }))
	}
	if l.Deny {
		o = append(o, fiber3rl.WithDenyHandler(func(c fiber.Ctx) error {
			res, _ := fiber3rl.ResultFrom(c)
			return c.Status(fiber.StatusTeapot).SendString(conformance.DenyBody(res))
		}))
	}
	switch l.OnError {
	case conformance.ErrorObserve:
		o = append(o, fiber3rl.WithErrorHandler(func(_ fiber.Ctx, err error) error { app.Report(err); return nil }))
	case conformance.ErrorRespond:
		// The handler answers and returns nil: its answer stands.
		o = append(o, fiber3rl.WithErrorHandler(func(c fiber.Ctx, err error) error {
			app.Report(err)
			return c.Status(fiber.StatusInternalServerError).SendString("custom error")
		}))
	}
	return o
}

// header reads a request header of c.
func header(c fiber.Ctx) func(string) string {
	return func(name string) string { return c.Get(name) }
}

// TestResultFrom checks that ResultFrom finds nothing before a policy decided.
func TestResultFrom(t *testing.T) {
	app := fiber.New()
	app.Get("/", func(c fiber.Ctx) error {
		_, ok := fiber3rl.ResultFrom(c)
		return c.SendString(strconv.FormatBool(ok))
	})
	res, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil))
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	assert.Equal(t, "false", string(body), "a result before a policy decided")
}

type userCtxKey struct{}

// TestUserInContext checks that a key function finds a value that an
// earlier middleware put into the request's context (c.SetContext) rather
// than into c.Locals.
func TestUserInContext(t *testing.T) {
	redistest.Need(t)
	client, err := core.New(redistest.Shared(t).Client(t), core.WithKeyPrefix(t.Name()+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	require.NoError(t, err)
	p := policy.MustNew(client, "user", core.PerMinute(1), policy.WithKey(keyfunc.User(userCtxKey{})), policy.WithMissingKeyDeny())
	app := fiber.New()
	app.Use(func(c fiber.Ctx) error {
		if u := c.Get(conformance.HeaderUser); u != "" {
			c.SetContext(context.WithValue(c.Context(), userCtxKey{}, utils.CopyString(u)))
		}
		return c.Next()
	})
	app.Use(fiber3rl.New(p))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
	status := func(user string) int {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if user != "" {
			req.Header.Set(conformance.HeaderUser, user)
		}
		res, err := app.Test(req)
		require.NoError(t, err)
		defer res.Body.Close()
		return res.StatusCode
	}
	assert.Equal(t, []int{200, 429, 200, 403}, []int{status("alice"), status("alice"), status("bob"), status("")})
}

// A nil policy is a mistake in the program: New panics at once.
func TestNewPanicsOnANilPolicy(t *testing.T) {
	assert.PanicsWithValue(t, "fiber3rl.New: nil *policy.Policy", func() { fiber3rl.New(nil) })
}
