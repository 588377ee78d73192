package echo5rl_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echo5rl"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// userKey is where the pre-middleware stores X-User, with c.Set.
const userKey = "user"

// adapter is how the conformance tables drive this package.
var adapter = conformance.Adapter{
	Name:        "echo5rl",
	Serve:       serve,
	UserKey:     userKey,
	Peer:        netip.MustParseAddr("127.0.0.1"),
	Disconnects: true,
	Key: func(param string) keyfunc.KeyFunc {
		return echo5rl.Key(func(c *echo.Context) (string, error) { return c.Param(param), nil })
	},
	Rate: func(l conformance.Limit) policy.RateFunc {
		return echo5rl.RateFunc(func(c *echo.Context) (core.Rate, error) { return l.TierRate(c.Request().Header.Get) })
	},
	Cost: func() policy.CostFunc {
		return echo5rl.CostFunc(func(c *echo.Context) (int64, error) { return conformance.Cost(c.Request().Header.Get) })
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

// TestBurst: 6 000 concurrent requests on a wait-mode login limit do not
// turn it off (see conformance.RunBurst).
func TestBurst(t *testing.T) {
	conformance.RunBurst(t, func(ps []*policy.Policy, onError func(string)) http.Handler {
		e := echo.New()
		var limits []echo.MiddlewareFunc
		for _, p := range ps {
			limits = append(limits, echo5rl.New(p, echo5rl.WithErrorHandler(func(c *echo.Context, _ error) error {
				onError(c.Request().RemoteAddr)
				return nil
			})))
		}
		e.POST("/login", func(c *echo.Context) error { return c.String(http.StatusOK, "logged in") }, limits...)
		return e
	})
}

func serve(t *testing.T, app conformance.App) func(*http.Request) (*http.Response, error) {
	limits := func(ls []conformance.Limit) []echo.MiddlewareFunc {
		m := make([]echo.MiddlewareFunc, len(ls))
		for i, l := range ls {
			m[i] = echo5rl.New(app.Policy(l), options(app, l)...)
		}
		return m
	}
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
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
	ok := func(c *echo.Context) error {
		c.Response().Header().Set(conformance.HeaderResult, conformance.ResultValue(echo5rl.ResultFrom(c)))
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
func options(app conformance.App, l conformance.Limit) []echo5rl.Option {
	var o []echo5rl.Option
	if l.SkipPath != "" {
		o = append(o, echo5rl.WithSkip(func(c *echo.Context) bool { return c.Request().URL.Path == l.SkipPath }))
	}
	if l.Deny {
		o = append(o, echo5rl.WithDenyHandler(func(c *echo.Context) error {
			res, _ := echo5rl.ResultFrom(c)
			return c.String(http.StatusTeapot, conformance.DenyBody(res))
		}))
	}
	switch l.OnError {
	case conformance.ErrorObserve:
		o = append(o, echo5rl.WithErrorHandler(func(_ *echo.Context, err error) error {
			app.Report(err)
			return nil
		}))
	case conformance.ErrorRespond:
		o = append(o, echo5rl.WithErrorHandler(func(c *echo.Context, err error) error {
			app.Report(err)
			return c.String(http.StatusInternalServerError, "custom error")
		}))
	}
	return o
}

// TestRefusalError checks what an application's own HTTPErrorHandler
// gets for a refusal: the status as echo.StatusCode and an *echo.HTTPError
// within, and what Echo's ProblemDetailsHTTPErrorHandler writes of it.
func TestRefusalError(t *testing.T) {
	redistest.Need(t)
	client, err := core.New(redistest.Shared(t).Client(t), core.WithKeyPrefix(t.Name()+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	require.NoError(t, err)
	p := policy.MustNew(client, "strict", core.PerMinute(1))
	refused := func(e *echo.Echo) *httptest.ResponseRecorder {
		e.GET("/", func(c *echo.Context) error { return c.String(http.StatusOK, "ok") }, echo5rl.New(p))
		var w *httptest.ResponseRecorder
		for range 2 {
			w = httptest.NewRecorder()
			e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		}
		return w
	}

	var got error
	e := echo.New()
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		got = err
		_ = c.NoContent(echo.StatusCode(err))
	}
	assert.Equal(t, http.StatusTooManyRequests, refused(e).Code)
	var he *echo.HTTPError
	require.ErrorAs(t, got, &he)
	assert.Equal(t, http.StatusTooManyRequests, he.Code)
	assert.Equal(t, http.StatusTooManyRequests, echo.StatusCode(got))

	e = echo.New()
	e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler(false)
	w := refused(e)
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, echo.MIMEApplicationProblemJSON, w.Header().Get(echo.HeaderContentType))
	assert.NotEmpty(t, w.Header().Get("Retry-After"))
	var pe echo.ProblemError
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &pe))
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", pe.Type)
	assert.Equal(t, http.StatusTooManyRequests, pe.Status)
	assert.NotEmpty(t, pe.Title)
	assert.NotEmpty(t, pe.Detail)
}

// TestResultFrom checks that ResultFrom finds nothing before a policy decided.
func TestResultFrom(t *testing.T) {
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	_, ok := echo5rl.ResultFrom(c)
	assert.False(t, ok, "a result before a policy decided")
}

// A nil policy is a mistake in the program: New panics at once.
func TestNewPanicsOnANilPolicy(t *testing.T) {
	assert.PanicsWithValue(t, "echo5rl.New: nil *policy.Policy", func() { echo5rl.New(nil) })
}
