package ginrl_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginrl"
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
	Name:        "ginrl",
	Serve:       serve,
	UserKey:     userKey,
	Peer:        netip.MustParseAddr("127.0.0.1"),
	Disconnects: true,
	Key: func(param string) keyfunc.KeyFunc {
		return ginrl.Key(func(c *gin.Context) (string, error) { return c.Param(param), nil })
	},
	Rate: func(l conformance.Limit) policy.RateFunc {
		return ginrl.RateFunc(func(c *gin.Context) (core.Rate, error) { return l.TierRate(c.GetHeader) })
	},
	Cost: func() policy.CostFunc {
		return ginrl.CostFunc(func(c *gin.Context) (int64, error) { return conformance.Cost(c.GetHeader) })
	},
	ProblemContentType: policy.ProblemContentType,
	RoutesInGlobal:     true,
}

func TestConformance(t *testing.T) { conformance.Run(t, adapter) }

// TestConformanceCluster runs the same table on Redis Cluster: 3 masters
// with a replica each, and, for the failure cases, a master that the case
// stops (see conformance.RunCluster).
func TestConformanceCluster(t *testing.T) { conformance.RunCluster(t, adapter) }

func TestHostileInput(t *testing.T) { conformance.RunHostile(t, adapter) }

func serve(t *testing.T, app conformance.App) func(*http.Request) (*http.Response, error) {
	gin.SetMode(gin.TestMode)
	engine := gin.New()
	engine.Use(func(c *gin.Context) {
		ctx, cancel := conformance.Controls(c.Request.Context(), c.GetHeader)
		defer cancel()
		c.Request = c.Request.WithContext(ctx)
		if u := conformance.UserOf(c.GetHeader); u != "" {
			c.Set(userKey, u)
		}
		c.Next()
	})
	for _, l := range app.Global {
		engine.Use(ginrl.New(app.Policy(l), options(app, l)...))
	}
	ok := func(c *gin.Context) {
		c.Header(conformance.HeaderResult, conformance.ResultValue(ginrl.ResultFrom(c)))
		c.String(app.Status(c.Request.Context(), c.GetHeader), "ok")
	}
	for _, r := range app.Routes {
		var chain []gin.HandlerFunc
		for _, l := range r.Limits {
			chain = append(chain, ginrl.New(app.Policy(l), options(app, l)...))
		}
		engine.GET(ginPath(r.Path), append(chain, ok)...)
	}
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	return func(req *http.Request) (*http.Response, error) {
		req.URL.Host = srv.Listener.Addr().String()
		return srv.Client().Do(req)
	}
}

// ginPath turns the parameters of a conformance path, "{id}", into gin's ":id".
func ginPath(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			segs[i] = ":" + s[1:len(s)-1]
		}
	}
	return strings.Join(segs, "/")
}

// options are the middleware's own options for l: skip, deny and error
// handlers.
func options(app conformance.App, l conformance.Limit) []ginrl.Option {
	var o []ginrl.Option
	if l.SkipPath != "" {
		o = append(o, ginrl.WithSkip(func(c *gin.Context) bool { return c.Request.URL.Path == l.SkipPath }))
	}
	if l.Deny {
		o = append(o, ginrl.WithDenyHandler(func(c *gin.Context) {
			res, _ := ginrl.ResultFrom(c)
			c.String(http.StatusTeapot, conformance.DenyBody(res))
		}))
	}
	switch l.OnError {
	case conformance.ErrorObserve:
		o = append(o, ginrl.WithErrorHandler(func(_ *gin.Context, err error) { app.Report(err) }))
	case conformance.ErrorRespond:
		o = append(o, ginrl.WithErrorHandler(func(c *gin.Context, err error) {
			app.Report(err)
			c.String(http.StatusInternalServerError, "custom error")
			c.Abort()
		}))
	}
	return o
}

// TestResultFrom checks that ResultFrom finds nothing before a policy decided.
func TestResultFrom(t *testing.T) {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	if _, ok := ginrl.ResultFrom(c); ok {
		t.Fatal("a result before a policy decided")
	}
}

// TestBurst: 6 000 concurrent requests on a wait-mode login limit do not
// turn it off (see conformance.RunBurst).
func TestBurst(t *testing.T) {
	conformance.RunBurst(t, func(ps []*policy.Policy, onError func(string)) http.Handler {
		gin.SetMode(gin.TestMode)
		engine := gin.New()
		var chain []gin.HandlerFunc
		for _, p := range ps {
			chain = append(chain, ginrl.New(p, ginrl.WithErrorHandler(func(c *gin.Context, _ error) { onError(c.Request.RemoteAddr) })))
		}
		engine.POST("/login", append(chain, func(c *gin.Context) { c.String(http.StatusOK, "logged in") })...)
		return engine
	})
}

// A nil policy is a mistake in the program: New panics at once.
func TestNewPanicsOnANilPolicy(t *testing.T) {
	assert.PanicsWithValue(t, "ginrl.New: nil *policy.Policy", func() { ginrl.New(nil) })
}
