// Package conformance is the behaviour table every middleware adapter runs
// through its own framework: counts, headers, wait mode, skip, handlers,
// failure policy with Redis stopped, per-route and per-user limits, and
// the security cases. An adapter's test describes how to serve an App; the
// table does the rest, against real redis-server processes.
package conformance

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
)

// ErrorMode selects the error handler of a Limit.
type ErrorMode int

const (
	// ErrorDefault: no error handler option (the adapter logs).
	ErrorDefault ErrorMode = iota
	// ErrorObserve: a handler that sends the error to App.Errors and
	// responds nothing, so the failure policy applies.
	ErrorObserve
	// ErrorRespond: a handler that sends the error to App.Errors and
	// answers 500 with the body "custom error".
	ErrorRespond
)

// HeaderStyle selects a Limit's header option.
type HeaderStyle int

const (
	HeadersDefault HeaderStyle = iota // no header option: IETF and X-RateLimit-*
	HeadersIETF                       // WithIETFHeaders
	HeadersLegacy                     // WithLegacyHeaders
	HeadersNone                       // WithoutHeaders
)

// Failure selects a Limit's failure policy.
type Failure int

const (
	FailDefault Failure = iota // no option: the local fallback, one instance
	FailLocal                  // WithFailLocal(Limit.Instances)
	FailOpen                   // WithFailOpen
	FailClosed                 // WithFailClosed
)

// Refund selects a Limit's refund option.
type Refund int

const (
	RefundNone       Refund = iota
	RefundFailed            // WithRefundFailed: status >= 400 gives the permits back
	RefundSuccessful        // WithRefundSuccessful: status < 400 gives them back
)

// MissingKey selects a Limit's missing-key option.
type MissingKey int

const (
	MissingKeyDefault MissingKey = iota // no option: the client IP
	MissingKeyIP                        // WithMissingKeyIP()
	MissingKeyDeny                      // WithMissingKeyDeny
	MissingKeyServe                     // WithMissingKeyServe
)

// Limit describes one middleware, framework-free. The adapter's test turns
// it into its options; a zero field gives no option.
type Limit struct {
	Name string
	Rate core.Rate
	Keys []keyfunc.KeyFunc
	// ParamKey keys the limit on the named path parameter, read from the
	// framework's own context by a key function of the adapter's Key.
	ParamKey   string
	Cost       int64
	MaxWait    time.Duration
	MaxWaiters int
	// MaxPerKey sets WithMaxWaitersPerKey.
	MaxPerKey int
	Timeout   time.Duration
	Failure   Failure
	Instances int // for FailLocal
	Headers   HeaderStyle
	// Tiers chooses each request's rate with the adapter's native rate
	// function (WithRates): the rate named by the X-Tier header, else Rate.
	Tiers map[string]core.Rate
	// CostHeader chooses each request's cost with the adapter's native
	// cost function (WithCosts): the number in the X-Cost header.
	CostHeader bool
	Refund     Refund
	DryRun     bool
	// DryRunHeaders: dry-run denials carry the rate limit headers.
	DryRunHeaders bool
	Observer      observe.Observer
	MissingKey    MissingKey
	// SkipPath exempts requests to this path.
	SkipPath string
	// Deny installs a deny handler answering 418 with the body
	// "deny r=<remaining> retry=<ms>", read with the adapter's ResultFrom.
	Deny    bool
	OnError ErrorMode
}

// Route is a route of an App with its own limits. Path uses {name} for
// parameters ("/users/{id}"); adapters translate it to their syntax.
type Route struct {
	Path   string
	Limits []Limit
}

// App is the application an adapter serves: a pre-middleware, then the
// global limits, then each route's limits and a handler answering 200 "ok".
//
// The pre-middleware reads control headers: X-User sets the request-scoped
// user under the adapter's UserKey; X-Deadline-Ms gives the request context
// a deadline; X-Cancel-Ms cancels the request context after that time.
type App struct {
	Client *core.Client
	// Prefix is Client's key prefix.
	Prefix string
	Global []Limit
	Routes []Route
	// Errors receives what error handlers are given (never blocks).
	Errors chan error
}

// Report sends err to a.Errors without blocking.
func (a App) Report(err error) {
	select {
	case a.Errors <- err:
	default:
	}
}

// Adapter is what an adapter's test provides.
type Adapter struct {
	Name string
	// Serve builds the App with the framework and returns a function that
	// performs one request.
	Serve func(t *testing.T, app App) func(*http.Request) (*http.Response, error)
	// Build builds the middleware of one Limit on app.Client, as Serve
	// does, and throws it away.
	Build func(app App, l Limit)
	// ProblemContentType is the Content-Type of the adapter's own 429, 403
	// and 503 answers: application/problem+json, or what the framework's
	// error handler writes where the refusals go through it.
	ProblemContentType string
	// RoutesInGlobal reports whether middleware added to every route knows
	// the route template.
	RoutesInGlobal bool
	// UserKey is the key under which the pre-middleware stores X-User.
	UserKey any
	// Peer is the address the framework reports for test clients.
	Peer netip.Addr
	// Disconnects reports whether a client closing its connection cancels
	// the request context (true for net/http servers; fasthttp cannot).
	Disconnects bool
	// HostileRefused lists the hostile cases (by name, see RunHostile) that
	// the framework, as Serve configures it, answers by itself before any
	// middleware runs, with the status it answers (-1: no response, the
	// request ends with the framework's error). The others reach the
	// middleware. nil: the framework refuses none.
	HostileRefused map[string]int
}

// Control headers read by the pre-middleware, the handlers and the native
// rate and cost functions.
const (
	HeaderUser     = "X-User"
	HeaderDeadline = "X-Deadline-Ms"
	HeaderCancel   = "X-Cancel-Ms"
	// HeaderStatus: the status the handler answers with (default 200).
	HeaderStatus = "X-Status"
	// HeaderTier: the tier of Limit.Tiers that chooses the rate.
	HeaderTier = "X-Tier"
	// HeaderCost: the cost of the request, for Limit.CostHeader.
	HeaderCost = "X-Cost"
)

// Status is the status a handler answers with: X-Status, else 200.
func Status(header func(string) string) int {
	if n, err := strconv.Atoi(header(HeaderStatus)); err == nil && n >= 200 && n <= 599 {
		return n
	}
	return http.StatusOK
}

// TierRate is the rate of a request under l: the tier named by X-Tier, else
// l.Rate.
func (l Limit) TierRate(header func(string) string) (core.Rate, error) {
	if r, ok := l.Tiers[header(HeaderTier)]; ok {
		return r, nil
	}
	return l.Rate, nil
}

// Cost is the cost of a request: the number in X-Cost.
func Cost(header func(string) string) (int64, error) {
	return strconv.ParseInt(header(HeaderCost), 10, 64)
}

// Controls applies the control headers of a request to its context; the
// pre-middlewares of net/http based adapters use it directly.
func Controls(ctx context.Context, header func(string) string) (context.Context, context.CancelFunc) {
	cancel := context.CancelFunc(func() {})
	if ms, err := strconv.Atoi(header(HeaderDeadline)); err == nil {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	if ms, err := strconv.Atoi(header(HeaderCancel)); err == nil {
		var c2 context.CancelFunc
		ctx, c2 = context.WithCancel(ctx)
		t := time.AfterFunc(time.Duration(ms)*time.Millisecond, c2)
		prev := cancel
		cancel = func() { t.Stop(); c2(); prev() }
	}
	return ctx, cancel
}

// DenyBody is what a Deny handler writes.
func DenyBody(r core.Result) string {
	return "deny r=" + strconv.FormatInt(r.Remaining, 10) + " retry=" + strconv.FormatInt(r.RetryAfter.Milliseconds(), 10)
}
