package ha_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/slot"
	"github.com/redlimit/redlimit/internal/testkit/stall"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

const (
	// decisionTimeout bounds each Redis round trip of a decision: the
	// middleware's default.
	decisionTimeout = 100 * time.Millisecond
	// holdMargin is how much longer than decisionTimeout a request may take
	// end to end, decided or failed, while the test process runs: the HTTP
	// round trip on loopback, the handler, and at times a second round trip
	// (a refund the policy's ledger owes is sent before the decision, with
	// a timeout of its own). The slowest request measured 106-182 ms on an
	// idle machine. A request held by a go-redis read timeout (3 s), its
	// dial retries (5 x 100 ms) or a failover would exceed it by far.
	holdMargin = 300 * time.Millisecond
	// maxHold is the longest any request may take, but for the time the
	// test process could not run meanwhile, which is added to it (see
	// stall): on 2 cores shared with other builds and tests under the race
	// detector, the process waits for a CPU for hundreds of milliseconds at
	// times (a request of 752 ms, 655 ms of it stalled, at a load average
	// of 6); a request held by the code runs no shorter for it, and the
	// process runs meanwhile.
	maxHold = decisionTimeout + holdMargin

	// maxFailedProbes bounds the round trips of a failing Redis's keys that
	// fail after the test saw the failover end (the replica promoted), on
	// a Cluster for each of the dead master's hash slots: while Redis fails,
	// the Client sends one call a second (its probe) and fails the others
	// at once, so that the number of failed probes counts the seconds of
	// the Client's own outage, whatever the load does to time. On a
	// Cluster, each failed probe has go-redis reload its slot map (at once,
	// or after its 200 ms cooldown): the probe in flight when the replica
	// was promoted, or the first after it if the map it used was read just
	// before, fails; the next one finds the replica. With Sentinel, the
	// go-redis pool redials a failed master from a prober once a second
	// (pool.tryDial): a probe before that redial fails at once, the next
	// one finds the new master. Observed: 0 or 1. go-redis alone would
	// fail a Cluster's probes for up to a minute (its periodic reload of
	// the slot map: go-redis issue #3979).
	maxFailedProbes = 2

	// workers and pace shape the steady load: each worker sends a request,
	// then sleeps pace.
	workers = 6
	pace    = 5 * time.Millisecond
)

var (
	// loadRate is so high that the load is never limited: every answer
	// is a decision (200 with rate limit headers) or a failure.
	loadRate = core.Rate{Permits: 1_000_000, Interval: time.Second}
	// strictRate is the rate of /strict, which checks limiting.
	strictRate = core.PerMinute(5)
)

type userKey struct{}

// app is a net/http application behind nethttprl with three routes, each
// with its own policy keyed by the user in the X-User header:
//
//	/open    policy "open",   loadRate,   fail open
//	/closed  policy "closed", loadRate,   fail closed
//	/strict  policy "strict", strictRate, fail open
type app struct {
	srv  *httptest.Server
	http *http.Client

	// trips records the round trips of c's go-redis client; perSlot says
	// that the Client runs them per hash slot (a Cluster).
	trips   *trips
	perSlot bool
	// stalls measures when the test process could not run.
	stalls *stall.Monitor

	mu       sync.Mutex
	errs     map[string]int             // failed decisions by kind of error
	byTarget map[target]map[string]int  // the same, by route and user
	last     map[string]observe.Outcome // each policy's last decision
}

// newApp serves the app on c, whose go-redis client's round trips tr
// records.
func newApp(t *testing.T, c *core.Client, tr *trips, perSlot bool) *app {
	a := &app{trips: tr, perSlot: perSlot, stalls: stall.Watch(t), errs: map[string]int{}, byTarget: map[target]map[string]int{},
		last: map[string]observe.Outcome{}}
	user := policy.WithKey(keyfunc.User(userKey{}))
	onError := nethttprl.WithErrorHandler(func(_ http.ResponseWriter, r *http.Request, err error) {
		a.recordErr(target{strings.TrimPrefix(r.URL.Path, "/"), r.Header.Get("X-User")}, err)
	})
	obs := policy.WithObserver(a)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("GET /open", nethttprl.New(policy.MustNew(c, "open", loadRate, user, policy.WithFailOpen(), obs), onError)(ok))
	mux.Handle("GET /closed", nethttprl.New(policy.MustNew(c, "closed", loadRate, user, policy.WithFailClosed(), obs), onError)(ok))
	mux.Handle("GET /strict", nethttprl.New(policy.MustNew(c, "strict", strictRate, user, policy.WithFailOpen(), obs), onError)(ok))
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-User"); u != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(a.srv.Close)
	a.http = a.srv.Client()
	a.http.Transport.(*http.Transport).MaxIdleConnsPerHost = 2 * workers
	a.http.Timeout = 10 * time.Second // a hung request shows as an error
	return a
}

// limiterName is the limiter name the app uses for route and user, after
// the Client's key prefix.
func limiterName(prefix, route, user string) string {
	return prefix + keyfunc.Escape(route) + ":" + keyfunc.Escape(user)
}

// Decision records what a policy decided (observe.Observer).
func (a *app) Decision(_ context.Context, d observe.Decision) {
	a.mu.Lock()
	a.last[d.Policy] = d.Outcome
	a.mu.Unlock()
}

func (a *app) Fallback(string, bool) {}

func (*app) Held(string, int64) {}

// lastOutcome returns what policy decided last.
func (a *app) lastOutcome(policy string) observe.Outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last[policy]
}

// timeoutKind is the kind of error of a decision that missed its timeout:
// the call was sent, and no answer came before its deadline.
const timeoutKind = "decision timeout"

func (a *app) recordErr(tg target, err error) {
	kind := "other: " + err.Error()
	switch s := err.Error(); {
	case errors.Is(err, core.ErrOverloaded):
		kind = "overloaded (never sent)"
	case errors.Is(err, core.ErrUnavailable):
		kind = "unavailable (Redis failing)"
	case errors.Is(err, context.DeadlineExceeded):
		kind = timeoutKind
	case strings.Contains(s, "connection refused"):
		kind = "connection refused"
	case strings.Contains(s, "EOF"), strings.Contains(s, "connection reset"), strings.Contains(s, "broken pipe"):
		kind = "connection lost"
	case strings.Contains(s, "CLUSTERDOWN"):
		kind = "CLUSTERDOWN"
	case strings.Contains(s, "READONLY"):
		kind = "READONLY"
	case strings.Contains(s, "MOVED"):
		kind = "MOVED"
	case strings.Contains(s, "LOADING"):
		kind = "LOADING"
	case strings.Contains(s, "i/o timeout"):
		kind = "i/o timeout"
	}
	a.mu.Lock()
	a.errs[kind]++
	if a.byTarget[tg] == nil {
		a.byTarget[tg] = map[string]int{}
	}
	a.byTarget[tg][kind]++
	a.mu.Unlock()
}

// errorsOf returns the failed decisions of the targets in keys by kind of
// error.
func (a *app) errorsOf(keys map[target]bool) map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[string]int{}
	for tg, kinds := range a.byTarget {
		if keys[tg] {
			for k, n := range kinds {
				m[k] += n
			}
		}
	}
	return m
}

// errorKinds returns the failed decisions by kind, for the log.
func (a *app) errorKinds() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var s []string
	for k, n := range a.errs {
		s = append(s, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// sample is one request and its answer.
type sample struct {
	route, user string
	start       time.Time
	took        time.Duration
	status      int // -1: no HTTP answer (err)
	decided     bool
	// shed: a 429 on a route the load never exhausts (open, closed): the
	// policy shed the request as this process's overload (core's
	// ErrOverloaded), which answers with the rate limit fields too.
	shed       bool
	retryAfter string
	err        string
}

// failed reports whether the failure policy was applied: served without
// a decision (fail open) or 503 (fail closed).
func (s sample) failed() bool {
	return !s.decided && (s.status == http.StatusOK || s.status == http.StatusServiceUnavailable)
}

// get performs one request to route as user.
func (a *app) get(route, user string) sample {
	s := sample{route: route, user: user, start: time.Now()}
	req, err := http.NewRequest(http.MethodGet, a.srv.URL+"/"+route, nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("X-User", user)
	resp, err := a.http.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	s.took = time.Since(s.start)
	if err != nil {
		s.status, s.err = -1, err.Error()
		return s
	}
	s.status = resp.StatusCode
	s.shed = route != "strict" && s.status == http.StatusTooManyRequests
	s.decided = resp.Header.Get("RateLimit") != "" && !s.shed
	s.retryAfter = resp.Header.Get("Retry-After")
	return s
}

// problem returns what is wrong with a sample of the load (routes open
// and closed, never limited), or "".
//
// A request may take maxHold, plus the time the process was stalled
// meanwhile (see maxHold). A request shed as this process's overload is
// right only if its call waited while round trips of its batcher (the
// Client's; on a Cluster, its hash slot's) came back from Redis: then
// Redis answered, and this process was too busy for the call. Shed while
// none came back, the call waited on a Redis that failed: the failure
// policy applies, not a 429.
func (a *app) problem(s sample) string {
	switch {
	case s.status == -1:
		return "no answer: " + s.err
	case s.took > maxHold:
		stalled := a.stalls.During(s.start, s.start.Add(s.took))
		if s.took > maxHold+stalled {
			return fmt.Sprintf("held %v, more than %v plus the %v the process was stalled meanwhile",
				s.took.Round(time.Millisecond), maxHold, stalled.Round(time.Millisecond))
		}
	}
	switch {
	case s.shed:
		if !a.answeredDuring(s) {
			return fmt.Sprintf("%s answered 429, shed as this process's overload, while no round trip of its batcher "+
				"came back from Redis (its Redis was failing)", s.route)
		}
	case s.route == "open" && s.status != http.StatusOK:
		return fmt.Sprintf("fail open answered %d", s.status)
	case s.route == "closed" && s.decided && s.status != http.StatusOK:
		return fmt.Sprintf("a decision answered %d", s.status)
	case s.route == "closed" && !s.decided && s.status != http.StatusServiceUnavailable:
		return fmt.Sprintf("fail closed answered %d without a decision", s.status)
	case s.route == "closed" && !s.decided && s.retryAfter != "1":
		return fmt.Sprintf("fail closed answered 503 with Retry-After %q", s.retryAfter)
	}
	return ""
}

// answeredDuring reports whether a round trip of s's batcher (on a
// Cluster, of s's hash slot) came back from Redis while s was being
// answered.
func (a *app) answeredDuring(s sample) bool {
	sl := -1
	if a.perSlot {
		sl = slot.Of(limiterName(prefix, s.route, s.user))
	}
	end := s.start.Add(s.took)
	for _, t := range a.trips.snapshot() {
		if !t.failed && !t.end.Before(s.start) && !t.end.After(end) && (sl < 0 || slices.Contains(t.slots, sl)) {
			return true
		}
	}
	return false
}

// target is a route and user the load requests.
type target struct {
	route, user string
}

// load sends steady requests from several goroutines over targets.
type load struct {
	a       *app
	targets []target
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	mu      sync.Mutex
	samples []sample
}

func startLoad(a *app, targets []target) *load {
	l := &load{a: a, targets: targets, stop: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				tg := targets[i%len(targets)]
				s := a.get(tg.route, tg.user)
				l.mu.Lock()
				l.samples = append(l.samples, s)
				l.mu.Unlock()
				time.Sleep(pace)
			}
		})
	}
	return l
}

// Stop stops the load and returns every sample, in order of start.
func (l *load) Stop() []sample {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.snapshot()
}

func (l *load) snapshot() []sample {
	l.mu.Lock()
	s := slices.Clone(l.samples)
	l.mu.Unlock()
	slices.SortFunc(s, func(a, b sample) int { return a.start.Compare(b.start) })
	return s
}

// waitFor waits until cond holds on the samples so far, checking every
// 20 ms, and reports whether it did within timeout.
func (l *load) waitFor(timeout time.Duration, cond func([]sample) bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond(l.snapshot()) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond(l.snapshot())
}

// warm reports whether every target got a decision.
func warm(targets []target) func([]sample) bool {
	want := map[target]bool{}
	for _, tg := range targets {
		want[tg] = true
	}
	return func(ss []sample) bool {
		seen := map[target]bool{}
		for _, s := range ss {
			if s.decided {
				seen[target{s.route, s.user}] = true
			}
		}
		return len(seen) == len(want)
	}
}

// recovered reports whether the last n samples of the targets in keys,
// all started after since, got a decision.
func recovered(keys map[target]bool, since time.Time, n int) func([]sample) bool {
	return func(ss []sample) bool {
		k := 0
		for i := len(ss) - 1; i >= 0 && k < n; i-- {
			s := ss[i]
			if !keys[target{s.route, s.user}] {
				continue
			}
			if s.start.Before(since) || !s.decided {
				return false
			}
			k++
		}
		return k == n
	}
}

// outage summarizes the samples of some targets around a fault at time
// fault.
type outage struct {
	total, failed int
	// firstFail and lastFail are the starts of the first and last failed
	// requests after the fault, relative to it; lastFailEnd is when the
	// last failed request was answered.
	firstFail, lastFail, lastFailEnd time.Duration
	// recovered is the start, relative to the fault, of the first decided
	// request after the last failure (-1: none).
	recovered time.Duration
	// maxTook is the longest request, and maxFailTook the longest failed one.
	maxTook, maxFailTook time.Duration
}

// healthyShare is the most failed decisions, as a share of their
// requests since a fault began, that the keys of the masters that stay up
// may see with no stall of the test process to explain them. A decision
// that a fault reached waits its whole timeout while the process runs; one
// that failed because the machine was loaded did not get the CPU for part
// of it (see explained). On an idle machine none fails; on a loaded one, a
// redis-server too may wait for a CPU past a decision's timeout now and
// then. A fault that reaches those keys fails far more of them: a third,
// when coalescing coupled the shards.
const healthyShare = 0.02

// explained reports whether s, a failed decision, failed because the test
// process was stalled: the time s took, less the time the process was
// stalled meanwhile, is shorter than the decision timeout. A decision waits
// its timeout on a timer, which fires on time however loaded the machine;
// a stall of the process during that wait makes it miss an answer that
// came in time, and the stall counts in s.took.
func (a *app) explained(s sample) bool {
	return s.took-a.stalls.During(s.start, s.start.Add(s.took)) < decisionTimeout
}

// checkHealthy checks the keys of the masters that stay up during a fault
// that began at fault, by what the Client sent and what Redis answered (the
// round trips a.trips recorded), then by what their requests got:
//
//   - no round trip of the Client's held the calls of two hash slots, so
//     none of theirs waited on the master that is down;
//   - every round trip of theirs since the fault came back from Redis, or
//     timed out (its context, a second past its callers' deadlines, ends on
//     time however long the process was stalled): none failed with an
//     error, as a round trip to the master that is down would;
//   - their failed decisions only missed the decision timeout: an error of
//     another kind (a refused connection, CLUSTERDOWN, MOVED, Redis counted
//     as failing, the call never sent) would mean that their round trip
//     went to the master that is down, or that their batcher took its
//     failure for theirs;
//   - at most healthyShare of their decisions since the fault failed for
//     no stall of the test process (see explained).
func checkHealthy(t *testing.T, a *app, ss []sample, keys map[target]bool, fault time.Time) {
	t.Helper()
	slots := map[int]bool{}
	for tg := range keys {
		slots[slot.Of(limiterName(prefix, tg.route, tg.user))] = true
	}
	spanning, failedTrips, timedOut, trips := 0, 0, 0, 0
	for _, tr := range a.trips.snapshot() {
		if len(tr.slots) > 1 {
			spanning++
		}
		if tr.start.Before(fault) || !slices.ContainsFunc(tr.slots, func(s int) bool { return slots[s] }) {
			continue
		}
		trips++
		switch {
		case tr.timedOut:
			timedOut++
		case tr.failed:
			failedTrips++
		}
	}
	assert.Zero(t, spanning, "round trips that held the calls of two hash slots")
	assert.Positive(t, trips, "round trips of the other masters' keys since the fault")
	assert.Zero(t, failedTrips, "round trips of the other masters' keys that failed with an error, of %d since the fault", trips)

	var since []sample
	for _, s := range ss {
		if !s.start.Before(fault) {
			since = append(since, s)
		}
	}
	o := measure(since, keys, fault)
	require.Positive(t, o.total, "requests on the masters that are up")
	unexplained := 0
	for _, s := range since {
		if keys[target{s.route, s.user}] && s.failed() && !a.explained(s) {
			unexplained++
		}
	}
	share := float64(unexplained) / float64(o.total)
	assert.LessOrEqual(t, share, healthyShare, "the other masters' keys kept their decisions: %d of them failed with no stall to explain it; %v", unexplained, o)
	kinds := a.errorsOf(keys)
	for k, n := range kinds {
		assert.Equal(t, timeoutKind, k, "%d decisions of the other masters' keys failed with %q", n, k)
	}
	t.Logf("the other masters' keys since the fault: %d round trips, %d failed with an error, %d timed out; %d of %d decisions "+
		"failed, %d of them (%.1f%%, bound %.0f%%) with no stall of the process to explain it; by error since the start: %v",
		trips, failedTrips, timedOut, o.failed, o.total, unexplained, 100*share, 100*healthyShare, kinds)
}

func measure(ss []sample, keys map[target]bool, fault time.Time) outage {
	var o outage
	o.firstFail, o.lastFail = -1, -1
	for _, s := range ss {
		if !keys[target{s.route, s.user}] {
			continue
		}
		o.total++
		o.maxTook = max(o.maxTook, s.took)
		if s.failed() {
			o.failed++
			o.maxFailTook = max(o.maxFailTook, s.took)
			at := s.start.Sub(fault)
			if o.firstFail < 0 {
				o.firstFail = at
			}
			o.lastFail = at
			o.lastFailEnd = s.start.Add(s.took).Sub(fault)
		}
	}
	o.recovered = -1
	for _, s := range ss {
		at := s.start.Sub(fault)
		if keys[target{s.route, s.user}] && s.decided && at > o.lastFail && at >= 0 {
			o.recovered = at
			break
		}
	}
	return o
}

// checkRecovery checks that decisions on keys, those of the Redis that
// failed, came back after the test saw its replica promoted at promoted
// (polled), within maxFailedProbes failed probes: on a Cluster, for each
// of their hash slots; and that they stayed back: from a decision timeout
// after every slot's round trips came back (time enough for the Client to
// note it), a decision on keys failed only for a stall of the test process
// (see explained). It logs when decisions came back, as observed.
func checkRecovery(t *testing.T, a *app, ss []sample, keys map[target]bool, fault, promoted time.Time) {
	t.Helper()
	slots := []int{-1}
	if a.perSlot {
		slots = nil
		for tg := range keys {
			if s := slot.Of(limiterName(prefix, tg.route, tg.user)); !slices.Contains(slots, s) {
				slots = append(slots, s)
			}
		}
		slices.Sort(slots)
	}
	all := a.trips.snapshot()
	var (
		log     []string
		allBack time.Time // when the last slot's round trips came back
	)
	for _, s := range slots {
		failed, back := probesAfter(all, s, promoted)
		which := "the Client's"
		if s >= 0 {
			which = "slot " + strconv.Itoa(s) + "'s"
		}
		if !assert.False(t, back.IsZero(), "%s round trips came back from Redis after the promotion", which) {
			continue
		}
		assert.LessOrEqual(t, failed, maxFailedProbes, "%s round trips that failed after the promotion, before one came back", which)
		log = append(log, fmt.Sprintf("%s: %d failed, then one came back %v after the promotion", which, failed,
			back.Sub(promoted).Round(time.Millisecond)))
		if back.After(allBack) {
			allBack = back
		}
	}
	t.Logf("round trips after the promotion (bound: %d failed): %s", maxFailedProbes, strings.Join(log, "; "))
	after, explained := 0, 0
	for _, s := range ss {
		if !keys[target{s.route, s.user}] || !s.failed() || s.start.Before(allBack.Add(decisionTimeout)) {
			continue
		}
		if a.explained(s) {
			explained++
		} else {
			after++
			if after <= 5 {
				t.Errorf("%s as %s failed %v after the promotion, %v after its round trips came back, and no stall of the process explains it (took %v)",
					s.route, s.user, s.start.Sub(promoted).Round(time.Millisecond), s.start.Sub(allBack).Round(time.Millisecond), s.took)
			}
		}
	}
	assert.Zero(t, after, "decisions that failed once the round trips came back, with no stall of the process to explain it")
	o := measure(ss, keys, fault)
	t.Logf("decisions back %v after the promotion (observed; the last failure started %v after it; %d failures after the round "+
		"trips came back, all for stalls of the process)", (o.recovered - promoted.Sub(fault)).Round(time.Millisecond),
		(o.lastFail - promoted.Sub(fault)).Round(time.Millisecond), explained)
}

func (o outage) String() string {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	if o.failed == 0 {
		return fmt.Sprintf("none of %d requests failed; slowest request %s", o.total, ms(o.maxTook))
	}
	back := "no decision after the last failure"
	if o.recovered >= 0 {
		back = "decisions back from " + ms(o.recovered)
	}
	return fmt.Sprintf("%d of %d requests failed over (first at %s, last at %s, answered by %s after the fault); "+
		"%s; slowest request %s, slowest failed one %s",
		o.failed, o.total, ms(o.firstFail), ms(o.lastFail), ms(o.lastFailEnd), back, ms(o.maxTook), ms(o.maxFailTook))
}

// checkSamples reports every sample of the load that breaks the failure
// policy or the hold bound (at most 10 of them, and how many), with its
// start relative to the fault.
func checkSamples(t *testing.T, a *app, ss []sample, fault time.Time) {
	t.Helper()
	bad := 0
	for _, s := range ss {
		if p := a.problem(s); p != "" {
			bad++
			if bad <= 10 {
				t.Errorf("%s as %s at %v after the fault: %s", s.route, s.user, s.start.Sub(fault).Round(time.Millisecond), p)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d requests broke the failure policy or the hold bound", bad, len(ss))
	}
	t.Logf("longest stall of the test process: %v", a.stalls.Longest().Round(time.Millisecond))
}

// exhaust spends the strict budget of user: it sends requests until Redis
// denies one, as the policy's observer saw it, and checks that Redis's log
// of the limiter (read through rdb) then holds the whole budget. A request
// that the failure policy served (its decision missed the timeout, on a
// loaded machine) or shed is sent again: its call took no permit, or took
// one late, which brings the denial sooner, and the log holds it.
func exhaust(t *testing.T, a *app, rdb redis.Cmdable, user string) {
	t.Helper()
	var granted int64
	for i := 1; i <= 10*int(strictRate.Permits); i++ {
		s := a.get("strict", user)
		switch o := a.lastOutcome("strict"); {
		case o == observe.Allowed && s.status == http.StatusOK:
			granted++
		case o == observe.Denied && s.status == http.StatusTooManyRequests:
			require.LessOrEqual(t, granted, strictRate.Permits, "Redis granted %s more than its budget", user)
			require.Equal(t, strictRate.Permits, logged(t, rdb, "strict", user), "Redis's log of %s holds its budget", user)
			return
		case o == observe.ErrorServed || o == observe.Shed:
		default:
			t.Fatalf("strict request %d of %s: status %d, outcome %v", i, user, s.status, o)
		}
	}
	t.Fatalf("%s: Redis granted %d and denied none in %d requests", user, granted, 10*strictRate.Permits)
}

// logged returns the grants in Redis's log of the limiter of route and
// user (Redisson's "{name}:permits").
func logged(t *testing.T, rdb redis.Cmdable, route, user string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := rdb.ZCard(ctx, "{"+limiterName(prefix, route, user)+"}:permits").Result()
	require.NoError(t, err)
	return n
}

// redisDecision sends requests to /strict as user until Redis decides one,
// and returns the outcome, as the policy's observer saw it: the failure
// policy answers when the call misses its timeout, which a new Client's
// first calls (a dial, the script not yet on the server) may on a loaded
// machine.
func (a *app) redisDecision(t *testing.T, user string) observe.Outcome {
	t.Helper()
	for range 20 {
		a.get("strict", user)
		if o := a.lastOutcome("strict"); o == observe.Allowed || o == observe.Denied {
			return o
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("Redis decided none of 20 requests of %s", user)
	return 0
}

// slowest returns the longest request of ss.
func slowest(ss []sample) time.Duration {
	var m time.Duration
	for _, s := range ss {
		m = max(m, s.took)
	}
	return m
}
