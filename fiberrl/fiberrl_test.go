package fiberrl_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/fiberrl"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const userKey = "user"

// adapter is how the conformance tables drive this package.
var adapter = conformance.Adapter{
	Name:    "fiberrl",
	Serve:   serve,
	UserKey: userKey,
	// app.Test serves a connection whose remote address is 0.0.0.0:0.
	Peer:        netip.MustParseAddr("0.0.0.0"),
	Disconnects: false,
	Key: func(param string) keyfunc.KeyFunc {
		return fiberrl.Key(func(c *fiber.Ctx) (string, error) { return c.Params(param), nil })
	},
	Rate: func(l conformance.Limit) policy.RateFunc {
		return fiberrl.RateFunc(func(c *fiber.Ctx) (core.Rate, error) { return l.TierRate(header(c)) })
	},
	Cost: func() policy.CostFunc {
		return fiberrl.CostFunc(func(c *fiber.Ctx) (int64, error) { return conformance.Cost(header(c)) })
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
	f := fiber.New(fiber.Config{DisableStartupMessage: true, ReadBufferSize: readBuffer})
	f.Use(recover.New()) // a handler's panic is a 500 (HeaderPanic)
	f.Use(func(c *fiber.Ctx) error {
		ctx, cancel := conformance.Controls(c.UserContext(), func(name string) string { return c.Get(name) })
		defer cancel()
		c.SetUserContext(ctx)
		if u := conformance.UserOf(func(name string) string { return c.Get(name) }); u != "" {
			c.Locals(userKey, utils.CopyString(u))
		}
		return c.Next()
	})
	for _, l := range app.Global {
		f.Use(fiberrl.New(app.Policy(l), options(app, l)...))
	}
	for _, r := range app.Routes {
		chain := make([]fiber.Handler, 0, len(r.Limits)+1)
		for _, l := range r.Limits {
			chain = append(chain, fiberrl.New(app.Policy(l), options(app, l)...))
		}
		chain = append(chain, func(c *fiber.Ctx) error {
			c.Set(conformance.HeaderResult, conformance.ResultValue(fiberrl.ResultFrom(c)))
			return c.Status(app.Status(c.UserContext(), header(c))).SendString("ok")
		})
		f.Get(fiberPath(r.Path), chain...)
	}
	return func(req *http.Request) (*http.Response, error) { return f.Test(req, -1) }
}

// fiberPath translates "/users/{id}" to "/users/:id".
func fiberPath(p string) string {
	p = strings.ReplaceAll(p, "{", ":")
	return strings.ReplaceAll(p, "}", "")
}

// options are the middleware's own options for l: skip, deny and error
// handlers.
func options(app conformance.App, l conformance.Limit) []fiberrl.Option {
	var o []fiberrl.Option
	if l.SkipPath != "" {
		o = append(o, fiberrl.WithSkip(func(c *fiber.Ctx) bool { return c.Path() == l.SkipPath }))
	}
	if l.Deny {
		o = append(o, fiberrl.WithDenyHandler(func(c *fiber.Ctx) error {
			res, _ := fiberrl.ResultFrom(c)
			return c.Status(fiber.StatusTeapot).SendString(conformance.DenyBody(res))
		}))
	}
	switch l.OnError {
	case conformance.ErrorObserve:
		o = append(o, fiberrl.WithErrorHandler(func(_ *fiber.Ctx, err error) error { app.Report(err); return nil }))
	case conformance.ErrorRespond:
		// The handler answers and returns nil: its answer stands.
		o = append(o, fiberrl.WithErrorHandler(func(c *fiber.Ctx, err error) error {
			app.Report(err)
			return c.Status(fiber.StatusInternalServerError).SendString("custom error")
		}))
	}
	return o
}

// header reads a request header of c.
func header(c *fiber.Ctx) func(string) string {
	return func(name string) string { return c.Get(name) }
}
