package nethttprl_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type userKey struct{}

// adapter is how the conformance tables drive this package.
var adapter = conformance.Adapter{
	Name:        "nethttprl",
	Serve:       serve,
	UserKey:     userKey{},
	Peer:        netip.MustParseAddr("127.0.0.1"),
	Disconnects: true,
	Key: func(param string) keyfunc.KeyFunc {
		return nethttprl.Key(func(c *http.Request) (string, error) { return c.PathValue(param), nil })
	},
	Rate: func(l conformance.Limit) policy.RateFunc {
		return nethttprl.RateFunc(func(c *http.Request) (core.Rate, error) { return l.TierRate(c.Header.Get) })
	},
	Cost: func() policy.CostFunc {
		return nethttprl.CostFunc(func(c *http.Request) (int64, error) { return conformance.Cost(c.Header.Get) })
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

func serve(t *testing.T, app conformance.App) func(*http.Request) (*http.Response, error) {
	limit := func(h http.Handler, limits []conformance.Limit) http.Handler {
		for i := len(limits) - 1; i >= 0; i-- {
			h = nethttprl.New(app.Policy(limits[i]), options(app, limits[i])...)(h)
		}
		return h
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(conformance.HeaderResult, conformance.ResultValue(nethttprl.ResultFrom(r)))
		w.WriteHeader(app.Status(r.Context(), r.Header.Get))
		_, _ = io.WriteString(w, "ok")
	})
	mux := http.NewServeMux()
	for _, r := range app.Routes {
		mux.Handle("GET "+r.Path, limit(ok, r.Limits))
	}
	h := limit(mux, app.Global)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := conformance.Controls(r.Context(), r.Header.Get)
		defer cancel()
		if u := conformance.UserOf(r.Header.Get); u != "" {
			ctx = context.WithValue(ctx, userKey{}, u)
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return func(req *http.Request) (*http.Response, error) {
		req.URL.Host = srv.Listener.Addr().String()
		return srv.Client().Do(req)
	}
}

// options are the middleware's own options for l: skip, deny and error
// handlers.
func options(app conformance.App, l conformance.Limit) []nethttprl.Option {
	var o []nethttprl.Option
	if l.SkipPath != "" {
		o = append(o, nethttprl.WithSkip(func(r *http.Request) bool { return r.URL.Path == l.SkipPath }))
	}
	if l.Deny {
		o = append(o, nethttprl.WithDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, _ := nethttprl.ResultFrom(r)
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, conformance.DenyBody(res))
		})))
	}
	switch l.OnError {
	case conformance.ErrorObserve:
		o = append(o, nethttprl.WithErrorHandler(func(_ http.ResponseWriter, _ *http.Request, err error) { app.Report(err) }))
	case conformance.ErrorRespond:
		o = append(o, nethttprl.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			app.Report(err)
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "custom error")
		}))
	}
	return o
}

// 20 000 new clients as fast as the middleware takes them: their keys all
// expire after the keepAlive and Redis memory returns to its baseline.
func TestNewClientChurnLeavesNothing(t *testing.T) {
	conformance.ChurnMemory(t, adapter, 20_000, 32)
}

// TestBurst: 6 000 concurrent requests on a wait-mode login limit do not
// turn it off (see conformance.RunBurst).
func TestBurst(t *testing.T) {
	conformance.RunBurst(t, func(ps []*policy.Policy, onError func(string)) http.Handler {
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "logged in") })
		report := nethttprl.WithErrorHandler(func(_ http.ResponseWriter, r *http.Request, _ error) { onError(r.RemoteAddr) })
		for i := len(ps) - 1; i >= 0; i-- {
			h = nethttprl.New(ps[i], report)(h)
		}
		return h
	})
}

// A nil policy is a mistake in the program: New panics at once.
func TestNewPanicsOnANilPolicy(t *testing.T) {
	assert.PanicsWithValue(t, "nethttprl.New: nil *policy.Policy", func() { nethttprl.New(nil) })
}

// A ServeMux pattern without a method takes every method, so its route key
// is the pattern alone: made-up methods buy no budget. A pattern with a
// method counts HEAD with GET.
func TestRouteKeysOfPatterns(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	c, err := core.New(rdb, core.WithKeyPrefix(t.Name()+strconv.FormatUint(rand.Uint64(), 36)+":"))
	require.NoError(t, err)
	limit := nethttprl.New(policy.MustNew(c, "route", core.PerMinute(3), policy.WithKey(keyfunc.Route())))
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("/any/{id}", limit(ok))
	mux.Handle("GET /get/{id}", limit(ok))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	served := func(path string, methods ...string) int {
		n := 0
		for i, m := range methods {
			req, err := http.NewRequest(m, srv.URL+path+strconv.Itoa(i), nil)
			require.NoError(t, err)
			res, err := srv.Client().Do(req)
			require.NoError(t, err)
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 3, served("/any/", "BREW", "PURGE", "X-ANYTHING", "GET", "POST", "DELETE"), "one budget for every method")
	assert.Equal(t, 3, served("/get/", "HEAD", "GET", "HEAD", "GET", "HEAD"), "HEAD with GET")
}
