package nethttprl_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/conformance"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
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
	Build: func(app conformance.App, l conformance.Limit) {
		nethttprl.New(app.Client, l.Rate, options(app, l)...)
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
			h = nethttprl.New(app.Client, limits[i].Rate, options(app, limits[i])...)(h)
		}
		return h
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(conformance.Status(r.Header.Get))
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

func options(app conformance.App, l conformance.Limit) []nethttprl.Option {
	var o []nethttprl.Option
	if l.Name != "" {
		o = append(o, nethttprl.WithName(l.Name))
	}
	if len(l.Keys) > 0 {
		o = append(o, nethttprl.WithKey(l.Keys...))
	}
	if l.ParamKey != "" {
		o = append(o, nethttprl.WithKey(nethttprl.Key(func(c *http.Request) (string, error) { return c.PathValue(l.ParamKey), nil })))
	}
	if l.Cost != 0 {
		o = append(o, nethttprl.WithCost(l.Cost))
	}
	if l.MaxWait != 0 {
		o = append(o, nethttprl.WithWait(l.MaxWait))
	}
	if l.MaxWaiters != 0 {
		o = append(o, nethttprl.WithMaxWaiters(l.MaxWaiters))
	}
	if l.Timeout != 0 {
		o = append(o, nethttprl.WithTimeout(l.Timeout))
	}
	switch l.Failure {
	case conformance.FailLocal:
		o = append(o, nethttprl.WithFailLocal(l.Instances))
	case conformance.FailOpen:
		o = append(o, nethttprl.WithFailOpen())
	case conformance.FailClosed:
		o = append(o, nethttprl.WithFailClosed())
	}
	if l.MaxPerKey != 0 {
		o = append(o, nethttprl.WithMaxWaitersPerKey(l.MaxPerKey))
	}
	if l.Tiers != nil {
		o = append(o, nethttprl.WithRates(func(r *http.Request) (core.Rate, error) { return l.TierRate(r.Header.Get) }))
	}
	if l.CostHeader {
		o = append(o, nethttprl.WithCosts(func(r *http.Request) (int64, error) { return conformance.Cost(r.Header.Get) }))
	}
	switch l.Refund {
	case conformance.RefundFailed:
		o = append(o, nethttprl.WithRefundFailed())
	case conformance.RefundSuccessful:
		o = append(o, nethttprl.WithRefundSuccessful())
	}
	if l.DryRun {
		o = append(o, nethttprl.WithDryRun(l.DryRunHeaders))
	}
	if l.Observer != nil {
		o = append(o, nethttprl.WithObserver(l.Observer))
	}
	switch l.Headers {
	case conformance.HeadersIETF:
		o = append(o, nethttprl.WithIETFHeaders())
	case conformance.HeadersLegacy:
		o = append(o, nethttprl.WithLegacyHeaders())
	case conformance.HeadersNone:
		o = append(o, nethttprl.WithoutHeaders())
	}
	switch l.MissingKey {
	case conformance.MissingKeyIP:
		o = append(o, nethttprl.WithMissingKeyIP())
	case conformance.MissingKeyDeny:
		o = append(o, nethttprl.WithMissingKeyDeny())
	case conformance.MissingKeyServe:
		o = append(o, nethttprl.WithMissingKeyServe())
	}
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

// TestBurst: 2 000 concurrent requests on a wait-mode login limit do not
// turn it off (see conformance.RunBurst).
func TestBurst(t *testing.T) {
	conformance.RunBurst(t, func(l conformance.BurstLimit) http.Handler {
		opts := []nethttprl.Option{nethttprl.WithName(l.Name), nethttprl.WithWait(l.MaxWait), nethttprl.WithObserver(l.Observer),
			nethttprl.WithErrorHandler(func(_ http.ResponseWriter, r *http.Request, _ error) { l.OnError(r.RemoteAddr) })}
		if l.Failure == conformance.FailOpen {
			opts = append(opts, nethttprl.WithFailOpen())
		}
		ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "logged in") })
		return nethttprl.New(l.Client, l.Rate, opts...)(ok)
	})
}
