// Package conformance is the behaviour table every middleware adapter runs
// through its own framework: counts, headers, wait mode, skip, handlers,
// failure policy with Redis stopped, per-route and per-user limits, and
// the security cases. An adapter's test describes how to serve an App; the
// table does the rest, against real redis-server processes.
package conformance

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
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

// Limit describes one policy and its middleware, framework-free. The table
// builds the policy (App.Policy); the adapter's test wraps it in its
// middleware with the adapter's own options (SkipPath, Deny, OnError).
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
	// function (RateFunc): see TierRate.
	Tiers map[string]core.Rate
	// CostHeader chooses each request's cost with the adapter's native
	// cost function (CostFunc): the number in the X-Cost header.
	CostHeader bool
	Refund     Refund
	DryRun     bool
	Observer   observe.Observer
	MissingKey MissingKey
	// SkipPath exempts requests to this path.
	SkipPath string
	// Deny installs a deny handler answering 418 with the body
	// "deny r=<remaining> retry=<ms>", read with the adapter's ResultFrom.
	Deny    bool
	OnError ErrorMode
	// Concurrency, when not 0, makes the limit a concurrency limit of
	// that many requests in flight (policy.NewConcurrency; Rate is not
	// used), with a lease of Lease (0: the default).
	Concurrency int64
	Lease       time.Duration
	// Quota, when not nil, makes the limit a quota per calendar period
	// (policy.NewQuota; Rate is not used).
	Quota *core.Quota
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

	adapter *Adapter
	built   *built // the policies Policy built
	holds   *holds // the requests the handler holds (HeaderHold)
}

// built are the policies of an App.
type built struct {
	mu sync.Mutex
	ps []*policy.Policy
}

// Status is what an App's handler does: it reports the request's real
// cost where X-Settle gives one (to every policy of the App: each settles
// only a request it limited); holds the request where X-Hold says (see
// HeaderHold); panics where X-Panic says; and returns the status to answer
// with: X-Status, else 200.
func (a App) Status(ctx context.Context, header func(string) string) int {
	if g := header(HeaderHold); g != "" && a.holds != nil {
		ms, _ := strconv.Atoi(header(HeaderHoldMs))
		a.holds.hold(ctx, g, time.Duration(ms)*time.Millisecond)
	}
	if header(HeaderPanic) != "" {
		panic("conformance: the handler panics, as X-Panic asks")
	}
	if n, err := strconv.ParseInt(header(HeaderSettle), 10, 64); err == nil && a.built != nil {
		a.built.mu.Lock()
		ps := append([]*policy.Policy(nil), a.built.ps...)
		a.built.mu.Unlock()
		for _, p := range ps {
			p.Settle(ctx, n)
		}
	}
	return Status(header)
}

// Policy builds the policy of l on a's Client, with the adapter's native
// key, rate and cost functions where l asks for them. It panics if
// policy.New, NewConcurrency or NewQuota fails.
func (a App) Policy(l Limit) *policy.Policy {
	var o []policy.Option
	keys := l.Keys
	if l.ParamKey != "" {
		keys = append(keys, a.adapter.Key(l.ParamKey))
	}
	if len(keys) > 0 {
		o = append(o, policy.WithKey(keys...))
	}
	if l.Cost != 0 {
		o = append(o, policy.WithCost(l.Cost))
	}
	if l.MaxWait != 0 {
		o = append(o, policy.WithWait(l.MaxWait))
	}
	if l.MaxWaiters != 0 {
		o = append(o, policy.WithMaxWaiters(l.MaxWaiters))
	}
	if l.MaxPerKey != 0 {
		o = append(o, policy.WithMaxWaitersPerKey(l.MaxPerKey))
	}
	if l.Timeout != 0 {
		o = append(o, policy.WithTimeout(l.Timeout))
	}
	switch l.Failure {
	case FailLocal:
		o = append(o, policy.WithFailLocal(l.Instances))
	case FailOpen:
		o = append(o, policy.WithFailOpen())
	case FailClosed:
		o = append(o, policy.WithFailClosed())
	}
	if l.Tiers != nil {
		o = append(o, policy.WithRateFunc(a.adapter.Rate(l)))
	}
	if l.CostHeader {
		o = append(o, policy.WithCostFunc(a.adapter.Cost()))
	}
	switch l.Refund {
	case RefundFailed:
		o = append(o, policy.WithRefundFailed())
	case RefundSuccessful:
		o = append(o, policy.WithRefundSuccessful())
	}
	if l.DryRun {
		o = append(o, policy.WithDryRun())
	}
	if l.Observer != nil {
		o = append(o, policy.WithObserver(l.Observer))
	}
	headers := map[HeaderStyle]policy.Option{
		HeadersIETF: policy.WithIETFHeaders(), HeadersLegacy: policy.WithLegacyHeaders(), HeadersNone: policy.WithoutHeaders(),
	}
	missing := map[MissingKey]policy.Option{
		MissingKeyIP: policy.WithMissingKeyIP(), MissingKeyDeny: policy.WithMissingKeyDeny(), MissingKeyServe: policy.WithMissingKeyServe(),
	}
	for _, opt := range []policy.Option{headers[l.Headers], missing[l.MissingKey]} {
		if opt != nil {
			o = append(o, opt)
		}
	}
	var p *policy.Policy
	switch {
	case l.Concurrency > 0:
		if l.Lease > 0 {
			o = append(o, policy.WithLease(l.Lease))
		}
		p = policy.MustNewConcurrency(a.Client, l.Name, l.Concurrency, o...)
	case l.Quota != nil:
		p = policy.MustNewQuota(a.Client, l.Name, *l.Quota, o...)
	default:
		p = policy.MustNew(a.Client, l.Name, l.Rate, o...)
	}
	if a.built != nil {
		a.built.mu.Lock()
		a.built.ps = append(a.built.ps, p)
		a.built.mu.Unlock()
	}
	return p
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
	// Key returns the adapter's native key function (its Key) reading the
	// named path parameter.
	Key func(param string) keyfunc.KeyFunc
	// Rate returns the adapter's native rate function (its RateFunc):
	// l.TierRate of the request's headers.
	Rate func(l Limit) policy.RateFunc
	// Cost returns the adapter's native cost function (its CostFunc): Cost
	// of the request's headers.
	Cost func() policy.CostFunc
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
	// HeaderSettle: the real cost of the request, reported by the handler
	// (App.Status).
	HeaderSettle = "X-Settle"
	// HeaderResult: the handler's answer carries the decision it read with
	// the adapter's ResultFrom (ResultValue).
	HeaderResult = "X-Result"
	// HeaderHold: the handler holds the request, counted in flight in the
	// group the header names, until the test releases the group, for the
	// milliseconds in HeaderHoldMs if given, or until the request's
	// context ends.
	HeaderHold   = "X-Hold"
	HeaderHoldMs = "X-Hold-Ms"
	// HeaderPanic: the handler panics.
	HeaderPanic = "X-Panic"
)

// ResultValue is what a handler writes in HeaderResult: the remaining
// permits of the decision the adapter's ResultFrom gave it, or "none".
func ResultValue(r core.Result, ok bool) string {
	if !ok {
		return "none"
	}
	return "r=" + strconv.FormatInt(r.Remaining, 10)
}

// Status is the status a handler answers with: X-Status, else 200.
func Status(header func(string) string) int {
	if n, err := strconv.Atoi(header(HeaderStatus)); err == nil && n >= 200 && n <= 599 {
		return n
	}
	return http.StatusOK
}

// TierRate is the rate of a request under l: without X-Tier, l.Rate; with
// it, the tier it names, as a plans map gives it: the zero Rate (invalid)
// for a tier l.Tiers lacks; and for the tier "error", an error.
func (l Limit) TierRate(header func(string) string) (core.Rate, error) {
	tier := header(HeaderTier)
	switch tier {
	case "":
		return l.Rate, nil
	case "error":
		return core.Rate{}, errTier
	}
	return l.Tiers[tier], nil
}

var errTier = errors.New("no plan for this user")

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
