package echorl_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echorl"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const userKey = "user"

// adapter is how the conformance tables drive this package.
var adapter = conformance.Adapter{
	Name:        "echorl",
	Serve:       serve,
	UserKey:     userKey,
	Peer:        netip.MustParseAddr("127.0.0.1"),
	Disconnects: true,
	Key: func(param string) keyfunc.KeyFunc {
		return echorl.Key(func(c echo.Context) (string, error) { return c.Param(param), nil })
	},
	Rate: func(l conformance.Limit) policy.RateFunc {
		return echorl.RateFunc(func(c echo.Context) (core.Rate, error) { return l.TierRate(c.Request().Header.Get) })
	},
	Cost: func() policy.CostFunc {
		return echorl.CostFunc(func(c echo.Context) (int64, error) { return conformance.Cost(c.Request().Header.Get) })
	},
	// Refusals go through Echo's DefaultHTTPErrorHandler.
	ProblemContentType: echo.MIMEApplicationJSON,
	RoutesInGlobal:     true,
}

func TestConformance(t *testing.T) { conformance.Run(t, adapter) }

// TestConformanceCluster runs the same table on Redis Cluster: 3 masters
// with a replica each, and, for the failure cases, a master that the case
// stops (see conformance.RunCluster).
func TestConformanceCluster(t *testing.T) { conformance.RunCluster(t, adapter) }

func TestHostileInput(t *testing.T) { conformance.RunHostile(t, adapter) }

func serve(t *testing.T, app conformance.App) func(*http.Request) (*http.Response, error) {
	limits := func(ls []conformance.Limit) []echo.MiddlewareFunc {
		m := make([]echo.MiddlewareFunc, len(ls))
		for i, l := range ls {
			m[i] = echorl.New(app.Policy(l), options(app, l)...)
		}
		return m
	}
	e := echo.New()
	e.HideBanner = true
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx, cancel := conformance.Controls(c.Request().Context(), c.Request().Header.Get)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			if u := conformance.UserOf(c.Request().Header.Get); u != "" {
				c.Set(userKey, u)
			}
			return next(c)
		}
	})
	e.Use(limits(app.Global)...)
	ok := func(c echo.Context) error {
		c.Response().Header().Set(conformance.HeaderResult, conformance.ResultValue(echorl.ResultFrom(c)))
		return c.String(app.Status(c.Request().Context(), c.Request().Header.Get), "ok")
	}
	for _, r := range app.Routes {
		path := strings.NewReplacer("{", ":", "}", "").Replace(r.Path)
		e.GET(path, ok, limits(r.Limits)...)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return func(req *http.Request) (*http.Response, error) {
		req.URL.Host = srv.Listener.Addr().String()
		return srv.Client().Do(req)
	}
}

// options are the middleware's own options for l: skip, deny and error
// handlers.
func options(app conformance.App, l conformance.Limit) []echorl.Option {
	var o []echorl.Option
	if l.SkipPath != "" {
		o = append(o, echorl.WithSkip(func(c echo.Context) bool { return c.Request().URL.Path == l.SkipPath }))
	}
	if l.Deny {
		o = append(o, echorl.WithDenyHandler(func(c echo.Context) error {
			res, _ := echorl.ResultFrom(c)
			return c.String(http.StatusTeapot, conformance.DenyBody(res))
		}))
	}
	switch l.OnError {
	case conformance.ErrorObserve:
		o = append(o, echorl.WithErrorHandler(func(_ echo.Context, err error) error {
			app.Report(err)
			return nil
		}))
	case conformance.ErrorRespond:
		o = append(o, echorl.WithErrorHandler(func(c echo.Context, err error) error {
			app.Report(err)
			return c.String(http.StatusInternalServerError, "custom error")
		}))
	}
	return o
}
