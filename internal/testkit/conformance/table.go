package conformance

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/stall"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
)

// caller performs requests against one served App.
type caller struct {
	t  *testing.T
	do func(*http.Request) (*http.Response, error)
}

type response struct {
	status  int
	header  http.Header
	body    string
	start   time.Time
	elapsed time.Duration
}

func (c caller) get(path string, header ...string) response {
	c.t.Helper()
	return c.getCtx(context.Background(), path, header...)
}

func (c caller) getCtx(ctx context.Context, path string, header ...string) response {
	c.t.Helper()
	return c.send(ctx, http.MethodGet, path, header...)
}

// send performs a request of method to path.
func (c caller) send(ctx context.Context, method, path string, header ...string) response {
	c.t.Helper()
	req := httptest.NewRequestWithContext(ctx, method, "http://test"+path, nil)
	req.RequestURI = ""
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	start := time.Now()
	resp, err := c.do(req)
	if err != nil {
		return response{status: -1, body: err.Error(), start: start, elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b), start: start, elapsed: time.Since(start)}
}

// inTime checks that r was answered in time however loaded the machine:
// within bound, what the code guarantees while the test process runs, plus
// the time the process was stalled meanwhile (waiting for a CPU, see
// package stall), which no code under test can shorten; and, if never is
// not 0, sooner than never: the shortest wait of the behaviour the check
// rules out, a wait on a timer, which a stall during it does not lengthen,
// so that a stall cannot excuse it.
func inTime(t *testing.T, m *stall.Monitor, r response, bound, never time.Duration, msgAndArgs ...any) bool {
	t.Helper()
	stalled := m.During(r.start, r.start.Add(r.elapsed))
	if r.elapsed < bound+stalled && (never == 0 || r.elapsed < never) {
		return true
	}
	msg := fmt.Sprintf("answered after %v: want less than %v, plus the %v the test process was stalled meanwhile",
		r.elapsed, bound, stalled)
	if never != 0 {
		msg += fmt.Sprintf(", and less than %v in any case", never)
	}
	return assert.Fail(t, msg, msgAndArgs...)
}

// statuses performs n requests to path and returns their status codes.
func (c caller) statuses(n int, path string, header ...string) []int {
	c.t.Helper()
	s := make([]int, n)
	for i := range s {
		s[i] = c.get(path, header...).status
	}
	return s
}

// The round-trip timeouts of the table's limits that set none. The default
// (100 ms) suits production, but a test machine running every package at
// once under the race detector can take longer for a first decision (dial,
// script load), which would turn a case into a fail-open answer. Cases on a
// Redis they stop keep a shorter one, well under noHang.
const (
	sharedTimeout  = 2 * time.Second
	failingTimeout = 500 * time.Millisecond
)

// patient returns a copy of ls in which every limit without a timeout has d.
func patient(ls []Limit, d time.Duration) []Limit {
	out := make([]Limit, len(ls))
	for i, l := range ls {
		if l.Timeout == 0 {
			l.Timeout = d
		}
		out[i] = l
	}
	return out
}

// patientRoutes returns a copy of rs whose limits have sharedTimeout unless
// they set a timeout.
func patientRoutes(rs []Route) []Route {
	out := make([]Route, len(rs))
	for i, r := range rs {
		r.Limits = patient(r.Limits, sharedTimeout)
		out[i] = r
	}
	return out
}

func repeat(status, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = status
	}
	return s
}

// Run runs the table for a against standalone redis-servers: one shared
// by most cases, and one of its own for each failure case, which stops it.
func Run(t *testing.T, a Adapter) {
	run(t, a, standalone(t))
}

// run runs the table for a against b.
func run(t *testing.T, a Adapter, b backend) {
	rdb := b.rdb
	stalls := stall.Watch(t)

	// app returns an App on the shared Redis, isolated by a key prefix.
	app := func(t *testing.T, global []Limit, routes ...Route) (App, caller) {
		prefix := t.Name() + "." + strconv.FormatUint(rand.Uint64(), 36) + ":"
		c, err := core.New(rdb, core.WithKeyPrefix(prefix))
		require.NoError(t, err)
		ap := App{Client: c, Prefix: prefix, Global: patient(global, sharedTimeout), Routes: patientRoutes(routes), Errors: make(chan error, 100), adapter: &a, built: &built{}, holds: newHolds()}
		return ap, caller{t: t, do: a.Serve(t, ap)}
	}
	// one serves a single route "/a" behind one global limit.
	one := func(t *testing.T, l Limit) (App, caller) {
		return app(t, []Limit{l}, Route{Path: "/a"}, Route{Path: "/health"})
	}
	perMinute := func(n int64) core.Rate { return core.PerMinute(n) }

	t.Run("allow then deny, with headers", func(t *testing.T) {
		t.Parallel()
		_, c := one(t, Limit{Name: "basic", Rate: perMinute(3)})
		for i, want := range []string{"2", "1", "0"} {
			r := c.get("/a")
			require.Equal(t, http.StatusOK, r.status, "request %d", i+1)
			assert.Equal(t, "ok", r.body)
			assert.Equal(t, "3", r.header.Get("X-RateLimit-Limit"))
			assert.Equal(t, want, r.header.Get("X-RateLimit-Remaining"))
			assert.Equal(t, "60", r.header.Get("X-RateLimit-Reset"))
			assert.Equal(t, `"basic";q=3;w=60`, r.header.Get("RateLimit-Policy"))
			assert.Equal(t, `"basic";r=`+want+`;t=60`, r.header.Get("RateLimit"))
			assert.Empty(t, r.header.Get("Retry-After"))
			assert.Equal(t, "r="+want, r.header.Get(HeaderResult), "the handler reads its decision with ResultFrom")
		}
		r := c.get("/a")
		require.Equal(t, http.StatusTooManyRequests, r.status)
		retry, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err)
		assert.True(t, retry == 59 || retry == 60, "Retry-After %d", retry)
		assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
		assert.Equal(t, strconv.Itoa(retry), r.header.Get("X-RateLimit-Reset"))
		assert.Equal(t, `"basic";r=0;t=`+strconv.Itoa(retry), r.header.Get("RateLimit"))
		assert.Equal(t, a.ProblemContentType, r.header.Get("Content-Type"))
		var p map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.body), &p), r.body)
		assert.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", p["type"])
		assert.EqualValues(t, 429, p["status"])
		assert.Equal(t, []any{"basic"}, p["violated-policies"])
	})

	t.Run("Retry-After is never earlier than the real wait", func(t *testing.T) {
		t.Parallel()
		ap, c := one(t, Limit{Name: "retry", Rate: core.Rate{Permits: 1, Interval: 1500 * time.Millisecond}})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		// Judged by Redis's clock: the grant's time, and the denial's,
		// which lies between the two readings around the request.
		grants, err := b.rdb.ZRangeWithScores(context.Background(), permitsKey(ap, "retry", a.Peer.String()), 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, grants, 1)
		before := redisNow(t, b.rdb)
		r := c.get("/a")
		after := redisNow(t, b.rdb)
		require.Equal(t, http.StatusTooManyRequests, r.status)
		// The wait, 1.5 s after the grant, rounded up to whole seconds
		// (2 when the denial comes within 0.5 s of the grant).
		wait := func(at time.Time) int64 {
			ms := int64(grants[0].Score) + 1500 - at.UnixMilli()
			return max((ms+999)/1000, 1)
		}
		got, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, got, wait(after), "the wait rounded up")
		assert.LessOrEqual(t, got, wait(before), "the wait rounded up")
		assert.Equal(t, `"retry";q=1`, r.header.Get("RateLimit-Policy"), "no w for a sub-second window")
		time.Sleep(2 * time.Second)
		assert.Equal(t, http.StatusOK, c.get("/a").status, "granted after Retry-After")
	})

	t.Run("wait mode grants once the window slides", func(t *testing.T) {
		t.Parallel()
		ap, c := one(t, Limit{Name: "wait", Rate: core.Rate{Permits: 1, Interval: 400 * time.Millisecond}, MaxWait: 2 * time.Second})
		// Judged by the times Redis recorded (each grant's score, in ms):
		// the second grant came once the first had left the window.
		granted := func() float64 {
			grants, err := b.rdb.ZRangeWithScores(context.Background(), permitsKey(ap, "wait", a.Peer.String()), 0, -1).Result()
			require.NoError(t, err)
			require.NotEmpty(t, grants)
			return grants[len(grants)-1].Score
		}
		require.Equal(t, http.StatusOK, c.get("/a").status)
		first := granted()
		r := c.get("/a")
		assert.Equal(t, http.StatusOK, r.status)
		assert.GreaterOrEqual(t, granted()-first, 400.0, "it waited for the permit")
	})

	t.Run("wait mode rejects at once when the wait cannot fit", func(t *testing.T) {
		t.Parallel()
		// The wait, about 10 s, fits neither the maximum wait (3 s) nor
		// the deadline (2 s): rejected after one round trip, long before
		// either would end.
		_, c := one(t, Limit{Name: "nofit", Rate: core.Rate{Permits: 1, Interval: 10 * time.Second}, MaxWait: 3 * time.Second})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		r := c.get("/a")
		assert.Equal(t, http.StatusTooManyRequests, r.status)
		inTime(t, stalls, r, 500*time.Millisecond, 3*time.Second, "rejected at once, not after the maximum wait")
		r = c.get("/a", HeaderDeadline, "2000")
		assert.Equal(t, http.StatusTooManyRequests, r.status, "nor past the request's deadline")
		inTime(t, stalls, r, 250*time.Millisecond, 2*time.Second, "rejected at once, not at the deadline")
	})

	t.Run("wait mode respects the request deadline", func(t *testing.T) {
		t.Parallel()
		// The wait, about 10 s, fits the maximum wait (30 s) but not the
		// deadline (3 s): rejected after one round trip, long before the
		// deadline.
		_, c := one(t, Limit{Name: "deadline", Rate: core.Rate{Permits: 1, Interval: 10 * time.Second}, MaxWait: 30 * time.Second})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		r := c.get("/a", HeaderDeadline, "3000")
		assert.Equal(t, http.StatusTooManyRequests, r.status)
		inTime(t, stalls, r, 400*time.Millisecond, 3*time.Second, "rejected at once, not at the deadline")
	})

	t.Run("a client that goes away ends its wait", func(t *testing.T) {
		t.Parallel()
		_, c := one(t, Limit{Name: "gone", Rate: core.Rate{Permits: 1, Interval: 10 * time.Second}, MaxWait: 30 * time.Second, MaxWaiters: 1})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		// B waits, then goes away: a disconnect, or a cancelled context
		// where the server cannot see disconnects.
		if a.Disconnects {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			r := c.getCtx(ctx, "/a")
			cancel()
			require.Equal(t, -1, r.status, "the client gave up")
		} else {
			r := c.get("/a", HeaderCancel, "300")
			require.Equal(t, http.StatusTooManyRequests, r.status)
			require.True(t, inTime(t, stalls, r, 2*time.Second, 5*time.Second, "the wait ended with the request's context, not with a permit"))
		}
		// C can wait only if B's wait has ended and freed the one slot.
		var r response
		require.Eventually(t, func() bool {
			r = c.get("/a", HeaderCancel, "300")
			return r.elapsed >= 250*time.Millisecond
		}, 5*time.Second, 50*time.Millisecond, "the waiter slot was freed")
		assert.Equal(t, http.StatusTooManyRequests, r.status)
	})

	t.Run("waiters are bounded", func(t *testing.T) {
		t.Parallel()
		_, c := one(t, Limit{Name: "waiters", Rate: core.Rate{Permits: 1, Interval: time.Second}, MaxWait: 5 * time.Second, MaxWaiters: 1})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		var wg sync.WaitGroup
		rs := make([]response, 2)
		for i := range rs {
			wg.Go(func() { rs[i] = c.get("/a") })
		}
		wg.Wait()
		ok, rejected := rs[0], rs[1]
		if ok.status != http.StatusOK {
			ok, rejected = rejected, ok
		}
		assert.Equal(t, http.StatusOK, ok.status, "one waited for the permit")
		assert.Equal(t, http.StatusTooManyRequests, rejected.status, "the other found no waiter slot")
		inTime(t, stalls, rejected, 500*time.Millisecond, 5*time.Second, "rejected at once, not after the maximum wait")
	})

	t.Run("skip", func(t *testing.T) {
		t.Parallel()
		_, c := one(t, Limit{Name: "skip", Rate: perMinute(1), SkipPath: "/health"})
		for i := 0; i < 3; i++ {
			r := c.get("/health")
			assert.Equal(t, http.StatusOK, r.status)
			assert.Empty(t, r.header.Get("RateLimit"))
			assert.Equal(t, "none", r.header.Get(HeaderResult), "no decision for a skipped request")
		}
		assert.Equal(t, []int{200, 429}, c.statuses(2, "/a"))
	})

	t.Run("custom deny handler", func(t *testing.T) {
		t.Parallel()
		_, c := one(t, Limit{Name: "deny", Rate: perMinute(1), Deny: true})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		r := c.get("/a")
		assert.Equal(t, http.StatusTeapot, r.status)
		assert.True(t, strings.HasPrefix(r.body, "deny r=0 retry="), r.body)
		assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"), "headers are set before the handler")
		assert.NotEmpty(t, r.header.Get("Retry-After"))
	})

	t.Run("cost", func(t *testing.T) {
		t.Parallel()
		_, c := one(t, Limit{Name: "cost", Rate: perMinute(5), Cost: 2})
		r := c.get("/a")
		assert.Equal(t, "3", r.header.Get("X-RateLimit-Remaining"))
		r = c.get("/a")
		assert.Equal(t, "1", r.header.Get("X-RateLimit-Remaining"))
		assert.Equal(t, http.StatusTooManyRequests, c.get("/a").status)
	})

	t.Run("header styles", func(t *testing.T) {
		t.Parallel()
		for _, hc := range []struct {
			style      HeaderStyle
			ietf, lgcy bool
		}{{HeadersDefault, true, true}, {HeadersIETF, true, false}, {HeadersLegacy, false, true}, {HeadersNone, false, false}} {
			_, c := one(t, Limit{Name: "style", Rate: perMinute(1), Headers: hc.style})
			for _, r := range []response{c.get("/a"), c.get("/a")} {
				assert.Equal(t, hc.ietf, r.header.Get("RateLimit") != "", "style %d", hc.style)
				assert.Equal(t, hc.ietf, r.header.Get("RateLimit-Policy") != "")
				assert.Equal(t, hc.lgcy, r.header.Get("X-RateLimit-Remaining") != "")
				assert.Equal(t, r.status == http.StatusTooManyRequests, r.header.Get("Retry-After") != "")
			}
		}
	})

	t.Run("per-route, per-user and composed limits", func(t *testing.T) {
		t.Parallel()
		user := keyfunc.User(a.UserKey)
		_, c := app(t, []Limit{{Name: "ip", Rate: perMinute(100)}},
			Route{Path: "/open"},
			Route{Path: "/login", Limits: []Limit{{Name: "login", Rate: perMinute(2)}}},
			Route{Path: "/users/{id}", Limits: []Limit{{Name: "user", Rate: perMinute(3), Keys: []keyfunc.KeyFunc{user}}}},
			Route{Path: "/items/{id}", Limits: []Limit{{Name: "route", Rate: perMinute(2), Keys: []keyfunc.KeyFunc{keyfunc.Route()}}}},
			Route{Path: "/multi", Limits: []Limit{
				{Name: "burst", Rate: core.Rate{Permits: 2, Interval: time.Second}},
				{Name: "hourly", Rate: core.PerHour(3)},
			}},
		)
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/login"))
		assert.Equal(t, []int{200, 200}, c.statuses(2, "/open"), "the login limit is the login route's")

		assert.Equal(t, []int{200, 200, 200, 429}, c.statuses(4, "/users/1", HeaderUser, "alice"))
		assert.Equal(t, []int{429}, c.statuses(1, "/users/2", HeaderUser, "alice"), "per user, not per path")
		assert.Equal(t, []int{200}, c.statuses(1, "/users/1", HeaderUser, "bob"))

		assert.Equal(t, []int{200, 200, 429}, append(c.statuses(1, "/items/1"), c.statuses(2, "/items/2")...),
			"the route template is the key, not the path")

		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/multi"), "the burst limit")
		time.Sleep(1100 * time.Millisecond)
		r := c.get("/multi")
		assert.Equal(t, http.StatusOK, r.status, "the third of the hour")
		assert.Equal(t, `"ip";q=100;w=60, "burst";q=2;w=1, "hourly";q=3;w=3600`, strings.Join(r.header.Values("RateLimit-Policy"), ", "),
			"each policy lists itself")
		assert.Regexp(t, `^"ip";r=\d+;t=\d+, "burst";r=1;t=1, "hourly";r=0;t=\d+$`, strings.Join(r.header.Values("RateLimit"), ", "))
		assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"), "the most restrictive remaining")
		assert.Equal(t, "r=0", r.header.Get(HeaderResult), "ResultFrom gives the decision the headers show")
		r = c.get("/multi")
		assert.Equal(t, http.StatusTooManyRequests, r.status, "the hourly limit")
		assert.Contains(t, r.body, `"hourly"`)
	})

	// Failure policy, against a Redis the case stops: the backend's failing
	// Redis number n, which no other case uses.
	failing := func(t *testing.T, n int, l Limit) (App, caller, outage) {
		frdb, prefix, s := b.failing(t, n)
		c, err := core.New(frdb, core.WithKeyPrefix(prefix))
		require.NoError(t, err)
		ap := App{Client: c, Prefix: prefix, Global: patient([]Limit{l}, failingTimeout), Routes: []Route{{Path: "/a"}}, Errors: make(chan error, 100), adapter: &a, built: &built{}, holds: newHolds()}
		return ap, caller{t: t, do: a.Serve(t, ap)}, s
	}
	// Requests must be answered well within this while Redis is down (plus
	// the test process's stalls: see inTime): four times failingTimeout. A
	// hang (go-redis's read timeout is 3 s, its dial timeout 5 s) leaves
	// the process running, and the stalls do not excuse it.
	const noHang = 2 * time.Second

	t.Run("fail open with Redis stopped", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		for _, mode := range []ErrorMode{ErrorDefault, ErrorObserve} {
			ap, c, s := failing(t, 0, Limit{Name: "open", Rate: perMinute(1), Keys: user, OnError: mode, Failure: FailOpen})
			require.Equal(t, []int{200, 429}, c.statuses(2, "/a", HeaderUser, "known"))
			require.NoError(t, s.Stop())
			for i := 0; i < 3; i++ {
				r := c.get("/a", HeaderUser, "new")
				assert.Equal(t, http.StatusOK, r.status, "served")
				inTime(t, stalls, r, noHang, 0)
				assert.Empty(t, r.header.Get("RateLimit"))
			}
			r := c.get("/a", HeaderUser, "known")
			assert.Equal(t, http.StatusTooManyRequests, r.status, "a denial known before the outage holds until its retry time")
			if mode == ErrorObserve {
				select {
				case err := <-ap.Errors:
					assert.Error(t, err)
				default:
					t.Error("the error handler was not called")
				}
			}
			require.NoError(t, s.Restart())
			require.Eventually(t, func() bool { return c.get("/a", HeaderUser, "new").status == http.StatusTooManyRequests },
				5*time.Second, 50*time.Millisecond, "limiting resumes")
		}
	})

	t.Run("fail closed with Redis stopped, then the local fallback", func(t *testing.T) {
		t.Parallel()
		_, c, s := failing(t, 1, Limit{Name: "closed", Rate: perMinute(5), Failure: FailClosed})
		require.Equal(t, http.StatusOK, c.get("/a").status)
		require.NoError(t, s.Stop())
		r := c.get("/a")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)
		inTime(t, stalls, r, noHang, 0)
		assert.Equal(t, "1", r.header.Get("Retry-After"))
		assert.Equal(t, a.ProblemContentType, r.header.Get("Content-Type"))
		assert.Contains(t, r.body, "temporary-reduced-capacity")
		for _, leak := range []string{"refused", "dial", "redis", "127.0.0.1", "EOF"} {
			assert.NotContains(t, strings.ToLower(r.body), strings.ToLower(leak), "no error text in the response")
		}

		// The default failure policy, WithFailLocal(1): with Redis stopped,
		// 10 requests on one key over 3 per 10 s get 3 x 200 and 7 x 429,
		// each within the decision timeout, the 429s with their headers;
		// once Redis is back, it decides again within a second. Until the
		// Client knows Redis fails (a round trip got no answer for a
		// second), a call waits its whole timeout: the first requests take
		// failingTimeout, and 100 ms more for the HTTP round trip and the
		// local decision while the process runs, plus its stalls (see
		// inTime). A call that waited for its round trip, past its
		// deadline, would take a second more: the Client's grace.
		for _, failure := range []Failure{FailDefault, FailLocal} {
			obs := &Recorder{}
			l := Limit{Name: "local", Rate: core.Rate{Permits: 3, Interval: 10 * time.Second}, Failure: failure, Instances: 1,
				Observer: obs, OnError: ErrorObserve}
			ap, c, s := failing(t, 1, l)
			require.Equal(t, http.StatusOK, c.get("/a", HeaderUser, "warm").status)
			require.NoError(t, s.Stop())
			var got []int
			for range 10 {
				r := c.get("/a")
				got = append(got, r.status)
				inTime(t, stalls, r, failingTimeout+100*time.Millisecond, failingTimeout+time.Second, "within the decision timeout")
				if r.status == http.StatusTooManyRequests {
					assert.NotEmpty(t, r.header.Get("Retry-After"))
					assert.NotEmpty(t, r.header.Get("RateLimit"))
				}
			}
			assert.Equal(t, []int{200, 200, 200, 429, 429, 429, 429, 429, 429, 429}, got, "the local fallback limits at the rate")
			assert.Equal(t, 3, obs.Count(observe.FallbackAllowed))
			assert.Equal(t, 7, obs.Count(observe.FallbackDenied))
			assert.Equal(t, []bool{true}, obs.Transitions(), "the fallback started once")
			assert.Empty(t, drain(ap.Errors), "the fallback decides: no failed decision")
			require.NoError(t, s.Restart())
			back := time.Now()
			require.Eventually(t, func() bool {
				c.get("/a", HeaderUser, "after")
				return obs.Last().Outcome == observe.Allowed || obs.Last().Outcome == observe.Denied
			}, 5*time.Second, 20*time.Millisecond, "Redis decides again")
			took := time.Since(back)
			stalled := stalls.During(back, back.Add(took))
			t.Logf("Redis decided again %v after its restart (the test process stalled for %v of it)", took, stalled)
			assert.Less(t, took, 1500*time.Millisecond+stalled, "a request tries Redis once a second (plus the process's stalls)")
			assert.Equal(t, []bool{true, false}, obs.Transitions())
		}
	})

	t.Run("custom error handler", func(t *testing.T) {
		t.Parallel()
		ap, c, s := failing(t, 2, Limit{Name: "custom", Rate: perMinute(5), OnError: ErrorRespond, Failure: FailOpen})
		require.NoError(t, s.Stop())
		r := c.get("/a")
		assert.Equal(t, http.StatusInternalServerError, r.status)
		assert.Equal(t, "custom error", r.body)
		inTime(t, stalls, r, noHang, 0)
		select {
		case err := <-ap.Errors:
			assert.ErrorIs(t, err, core.ErrUnavailable, "Redis is taken for failing from the first call")
		case <-time.After(10 * time.Second):
			t.Error("the error handler saw no error")
		}
	})

	t.Run("a request with no key is limited by its client IP", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		for _, mk := range []MissingKey{MissingKeyDefault, MissingKeyIP} {
			ap, c := one(t, Limit{Name: "nokey", Rate: perMinute(2), Keys: user, MissingKey: mk, OnError: ErrorObserve})
			assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a"), "limited, by the client IP")
			assert.Equal(t, []int{200}, c.statuses(1, "/a", HeaderUser, a.Peer.String()), "a user named like the address has a budget of its own")
			assert.Equal(t, []int{200}, c.statuses(1, "/a", HeaderUser, "alice"))
			assert.Empty(t, drain(ap.Errors), "no error: a missing key is no failure")
			ks, err := b.keys(context.Background())
			require.NoError(t, err)
			assert.Contains(t, ks, ap.Prefix+"nokey::ip:"+keyfunc.Escape(a.Peer.String()), "the namespace of requests without a key")
		}
	})

	t.Run("a request with no key is denied", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		ap, c := one(t, Limit{Name: "nokey-deny", Rate: perMinute(2), Keys: user, MissingKey: MissingKeyDeny, OnError: ErrorObserve})
		for range 3 {
			r := c.get("/a")
			assert.Equal(t, http.StatusForbidden, r.status)
			assert.Equal(t, a.ProblemContentType, r.header.Get("Content-Type"))
			assert.Contains(t, r.body, `"status":403`)
			assert.Empty(t, r.header.Get("RateLimit"))
		}
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a", HeaderUser, "carol"))
		assert.Empty(t, drain(ap.Errors), "no error: a missing key is no failure")
	})

	t.Run("a request with no key is served when told so", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		ap, c := one(t, Limit{Name: "nokey-serve", Rate: perMinute(1), Keys: user, MissingKey: MissingKeyServe, OnError: ErrorObserve})
		for range 3 {
			r := c.get("/a")
			assert.Equal(t, http.StatusOK, r.status)
			assert.Empty(t, r.header.Get("RateLimit"), "no limit, no headers")
		}
		assert.Equal(t, []int{200, 429}, c.statuses(2, "/a", HeaderUser, "carol"))
		assert.Empty(t, drain(ap.Errors), "no error: a missing key is no failure")
	})

	t.Run("a key function of the framework's own", func(t *testing.T) {
		t.Parallel()
		_, c := app(t, nil, Route{Path: "/tenants/{id}", Limits: []Limit{{Name: "tenant", Rate: perMinute(2), ParamKey: "id"}}})
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/tenants/1"))
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/tenants/a:b"), "per path parameter")
	})

	t.Run("a route key where the route is not known", func(t *testing.T) {
		t.Parallel()
		ap, c := app(t, []Limit{{Name: "route", Rate: perMinute(2), Keys: []keyfunc.KeyFunc{keyfunc.Route()}, OnError: ErrorObserve}},
			Route{Path: "/a"}, Route{Path: "/b"})
		if a.RoutesInGlobal {
			assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a"))
			assert.Equal(t, []int{200}, c.statuses(1, "/b"), "per route")
			assert.Empty(t, drain(ap.Errors))
			return
		}
		// Never unlimited: the missing-key rule, the client IP in the
		// namespace of requests without a key, and the error reported.
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a"), "limited by the client IP")
		assert.Equal(t, []int{429}, c.statuses(1, "/b"), "in one namespace: the route is unknown")
		errs := drain(ap.Errors)
		require.Len(t, errs, 4)
		for _, err := range errs {
			assert.ErrorIs(t, err, keyfunc.ErrRouteUnknown)
			assert.Contains(t, err.Error(), a.Name+": ", "the adapter says where the middleware belongs")
		}
		ks, err := b.keys(context.Background())
		require.NoError(t, err)
		assert.Contains(t, ks, ap.Prefix+"route::ip:"+keyfunc.Escape(a.Peer.String()))
	})

	t.Run("a key function that fails falls under the missing-key rule", func(t *testing.T) {
		t.Parallel()
		broken := func(keyfunc.Request) (string, error) { return "", errBrokenKey }
		for _, mk := range []MissingKey{MissingKeyDefault, MissingKeyDeny} {
			obs := &Recorder{}
			ap, c := one(t, Limit{Name: "broken", Rate: perMinute(2), Keys: []keyfunc.KeyFunc{broken}, MissingKey: mk, Observer: obs, OnError: ErrorObserve})
			if mk == MissingKeyDeny {
				assert.Equal(t, []int{403, 403}, c.statuses(2, "/a"))
			} else {
				assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a"), "limited by the client IP, never unlimited")
			}
			errs := drain(ap.Errors)
			require.NotEmpty(t, errs)
			for _, err := range errs {
				assert.ErrorIs(t, err, errBrokenKey, "reported to the error handler")
			}
			assert.ErrorIs(t, obs.Last().Err, errBrokenKey, "and to the observer")
		}
	})

	t.Run("dry run serves every request and reports its denials", func(t *testing.T) {
		t.Parallel()
		obs := &Recorder{}
		// A minute's window: ten requests fit in it however slow the machine.
		_, c := one(t, Limit{Name: "dry", Rate: perMinute(3), DryRun: true, Observer: obs})
		for i := range 10 {
			r := c.get("/a")
			assert.Equal(t, http.StatusOK, r.status)
			assert.Empty(t, r.header.Get("Retry-After"), "Retry-After belongs to a refusal")
			if i >= 3 {
				assert.Regexp(t, `^"dry";r=0;t=(59|60)$`, r.header.Get("RateLimit"), "a dry-run denial carries the fields")
				assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
			}
		}
		assert.Equal(t, 3, obs.Count(observe.Allowed))
		assert.Equal(t, 7, obs.Count(observe.DryRunDenied))
	})

	t.Run("a rate per request: two tiers", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		_, c := one(t, Limit{Name: "plan", Rate: perMinute(2), Keys: user, Tiers: map[string]core.Rate{"pro": perMinute(4)}})
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a", HeaderUser, "free-user"))
		assert.Equal(t, []int{200, 200, 200, 200, 429}, c.statuses(5, "/a", HeaderUser, "pro-user", HeaderTier, "pro"))
		r := c.get("/a", HeaderUser, "other", HeaderTier, "pro")
		assert.Equal(t, `"plan";q=4;w=60`, r.header.Get("RateLimit-Policy"), "the headers show the rate used")
		assert.Equal(t, "4", r.header.Get("X-RateLimit-Limit"))
		r = c.get("/a", HeaderUser, "other2")
		assert.Equal(t, `"plan";q=2;w=60`, r.header.Get("RateLimit-Policy"))
	})

	t.Run("an unknown plan or a failing rate function limits at the policy's rate", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		ap, c := one(t, Limit{Name: "plan", Rate: perMinute(2), Keys: user, Tiers: map[string]core.Rate{"pro": perMinute(4)}, OnError: ErrorObserve})
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a", HeaderUser, "u1", HeaderTier, "enterprise"),
			"a plan the map lacks gives the zero rate: the policy's rate, never unlimited")
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a", HeaderUser, "u2", HeaderTier, "error"))
		errs := drain(ap.Errors)
		require.Len(t, errs, 6, "each reported")
		assert.ErrorIs(t, errs[0], core.ErrInvalidRate)
		assert.ErrorIs(t, errs[3], errTier)
	})

	t.Run("a cost per request", func(t *testing.T) {
		t.Parallel()
		ap, c := one(t, Limit{Name: "costly", Rate: perMinute(10), CostHeader: true, OnError: ErrorObserve})
		assert.Equal(t, []int{200, 200, 429}, c.statuses(3, "/a", HeaderCost, "5"), "a cost of 5 against 10 per minute")
		r := c.get("/a", HeaderCost, "11")
		assert.Equal(t, http.StatusRequestEntityTooLarge, r.status, "a cost above the rate can never be served")
		assert.Equal(t, a.ProblemContentType, r.header.Get("Content-Type"))
		assert.Contains(t, r.body, "a-cost-above-the-rate")
		assert.Empty(t, r.header.Get("Retry-After"), "no retry time that lies")
		assert.Empty(t, drain(ap.Errors))
		// A cost the function cannot give, or below 1, is the client's
		// mistake: 400, never a request served without a limit.
		for _, cost := range []string{"0", "-3", "abc", ""} {
			r := c.get("/a", HeaderCost, cost)
			assert.Equal(t, http.StatusBadRequest, r.status, "cost %q", cost)
			assert.Equal(t, a.ProblemContentType, r.header.Get("Content-Type"))
			assert.Contains(t, r.body, `"status":400`)
		}
		assert.Len(t, drain(ap.Errors), 4, "each reported")
		assert.Equal(t, http.StatusTooManyRequests, c.get("/a", HeaderCost, "1").status, "the budget is where it was")
	})

	t.Run("a request settles its real cost after it ran", func(t *testing.T) {
		t.Parallel()
		// Reserve 1 000 of 10 000 a minute, use 12 000: the next
		// reservation, even of 1, is refused, with 0 remaining, until that
		// grant leaves the window.
		ap, c := one(t, Limit{Name: "tokens", Rate: perMinute(10_000), CostHeader: true})
		require.Equal(t, http.StatusOK, c.get("/a", HeaderCost, "1000", HeaderSettle, "12000").status)
		r := c.get("/a", HeaderCost, "1")
		require.Equal(t, http.StatusTooManyRequests, r.status, "in debt")
		assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
		retry, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err)
		// The settled grant keeps its time, which Redis recorded as its
		// score in the log; Redis denied the second request at a time
		// between its start and its answer (Redis and the test share the
		// host's clock, to the millisecond of the score).
		grants, err := b.rdb.ZRangeWithScores(context.Background(), permitsKey(ap, "tokens", a.Peer.String()), 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, grants, 1, "the settled grant")
		leaves := time.UnixMilli(int64(grants[0].Score)).Add(time.Minute)
		least, most := leaves.Sub(r.start.Add(r.elapsed))-time.Millisecond, leaves.Sub(r.start)+time.Millisecond
		assert.True(t, time.Duration(retry)*time.Second >= least && time.Duration(retry-1)*time.Second < most,
			"Retry-After %d s: when the settled grant leaves the window, %v to %v after the denial", retry, least, most)

		// Reserve 1 000, use 100: nine more reservations of 1 000 fit, a
		// tenth does not.
		_, c = one(t, Limit{Name: "tokens", Rate: perMinute(10_000), CostHeader: true})
		require.Equal(t, http.StatusOK, c.get("/a", HeaderCost, "1000", HeaderSettle, "100").status)
		assert.Equal(t, repeat(http.StatusOK, 9), c.statuses(9, "/a", HeaderCost, "1000"))
		assert.Equal(t, http.StatusTooManyRequests, c.get("/a", HeaderCost, "1000").status)

		// A request given back is not also settled; one that reports
		// nothing keeps its reservation.
		_, c = one(t, Limit{Name: "tokens", Rate: perMinute(10_000), CostHeader: true, Refund: RefundFailed})
		require.Equal(t, http.StatusInternalServerError, c.get("/a", HeaderCost, "1000", HeaderSettle, "9000", HeaderStatus, "500").status)
		require.Equal(t, http.StatusOK, c.get("/a", HeaderCost, "1000").status)
		assert.Equal(t, "8000", c.get("/a", HeaderCost, "1000").header.Get("X-RateLimit-Remaining"),
			"the refunded request took nothing, the one that reported nothing 1 000")
	})

	t.Run("refunds by response status", func(t *testing.T) {
		t.Parallel()
		_, c := one(t, Limit{Name: "refund", Rate: perMinute(3), Refund: RefundFailed})
		assert.Equal(t, repeat(500, 10), c.statuses(10, "/a", HeaderStatus, "500"), "failed requests are served and given back")
		assert.Equal(t, []int{200, 200, 200, 429}, c.statuses(4, "/a"), "the whole quota is still there")

		_, c = one(t, Limit{Name: "logins", Rate: perMinute(3), Refund: RefundSuccessful})
		assert.Equal(t, repeat(200, 5), c.statuses(5, "/a"), "successful logins are given back")
		assert.Equal(t, []int{401, 401, 401, 429}, c.statuses(4, "/a", HeaderStatus, "401"), "failed logins count")
	})

	t.Run("refunds are exact under concurrency", func(t *testing.T) {
		t.Parallel()
		ap, c := one(t, Limit{Name: "exact", Rate: perMinute(1000), Refund: RefundFailed})
		var wg sync.WaitGroup
		statuses := make([]int, 64)
		for i := range statuses {
			wg.Go(func() {
				status := "200"
				if i%2 == 1 {
					status = "503"
				}
				statuses[i] = c.get("/a", HeaderStatus, status).status
			})
		}
		wg.Wait()
		for i, s := range statuses {
			assert.Equal(t, []int{200, 503}[i%2], s)
		}
		n, err := b.rdb.ZCard(context.Background(), permitsKey(ap, "exact", a.Peer.String())).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 32, n, "the log holds exactly the grants that were not given back")
	})

	t.Run("a request refused by one limit takes nothing from the others", func(t *testing.T) {
		t.Parallel()
		// Both orders: the limit that refuses comes second, after one that
		// granted; that grant is given back.
		burst, hourly := Limit{Name: "burst", Rate: perMinute(3)}, Limit{Name: "hourly", Rate: core.PerHour(2)}
		ap, c := app(t, nil,
			Route{Path: "/burst-first", Limits: []Limit{burst, hourly}},
			Route{Path: "/hourly-first", Limits: []Limit{{Name: "hourly2", Rate: core.PerHour(3)}, {Name: "burst2", Rate: perMinute(2)}}})
		assert.Equal(t, []int{200, 200, 429, 429}, c.statuses(4, "/burst-first"), "the hourly limit refuses")
		assert.Equal(t, int64(2), used(t, b, ap, "burst", a.Peer.String()), "the burst limit kept only the served requests")
		assert.Equal(t, []int{200, 200, 429, 429}, c.statuses(4, "/hourly-first"), "the burst limit refuses")
		assert.Equal(t, int64(2), used(t, b, ap, "hourly2", a.Peer.String()), "the hourly limit kept only the served requests")
	})

	t.Run("the headers of a 429 are those of the limit that refused", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		_, c := app(t, []Limit{{Name: "ip", Rate: core.Rate{Permits: 10, Interval: 10 * time.Second}}},
			Route{Path: "/me", Limits: []Limit{{Name: "user", Rate: perMinute(2), Keys: user}}})
		assert.Equal(t, []int{200, 200}, c.statuses(2, "/me", HeaderUser, "dave"))
		r := c.get("/me", HeaderUser, "dave")
		require.Equal(t, http.StatusTooManyRequests, r.status)
		assert.Equal(t, "2", r.header.Get("X-RateLimit-Limit"), "the per-user limit refused")
		assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
		reset, err := strconv.Atoi(r.header.Get("X-RateLimit-Reset"))
		require.NoError(t, err)
		assert.Greater(t, reset, 10, "the reset of the per-user limit, not the 10 s of the per-IP one")
		assert.Equal(t, r.header.Get("Retry-After"), r.header.Get("X-RateLimit-Reset"))
	})

	t.Run("one name shares one budget", func(t *testing.T) {
		t.Parallel()
		_, c := app(t, nil,
			Route{Path: "/a", Limits: []Limit{{Name: "shared", Rate: perMinute(3)}}},
			Route{Path: "/b", Limits: []Limit{{Name: "shared", Rate: perMinute(3)}}},
		)
		assert.Equal(t, []int{200, 200}, c.statuses(2, "/a"))
		assert.Equal(t, []int{200, 429}, c.statuses(2, "/b"), "one budget")
	})

	t.Run("a spoofed X-Forwarded-For does not change the key", func(t *testing.T) {
		t.Parallel()
		_, c := one(t, Limit{Name: "spoof", Rate: perMinute(1)})
		assert.Equal(t, http.StatusOK, c.get("/a", "X-Forwarded-For", "198.51.100.1").status)
		assert.Equal(t, http.StatusTooManyRequests, c.get("/a", "X-Forwarded-For", "198.51.100.2").status)
		assert.Equal(t, http.StatusTooManyRequests, c.get("/a", "X-Real-IP", "198.51.100.3").status)
	})

	t.Run("behind a trusted proxy the rightmost untrusted address is the key", func(t *testing.T) {
		t.Parallel()
		ip := keyfunc.IP(keyfunc.TrustProxies(netip.PrefixFrom(a.Peer, a.Peer.BitLen())))
		_, c := one(t, Limit{Name: "proxy", Rate: perMinute(1), Keys: []keyfunc.KeyFunc{ip}})
		assert.Equal(t, http.StatusOK, c.get("/a", "X-Forwarded-For", "203.0.113.9, 198.51.100.7").status)
		assert.Equal(t, http.StatusTooManyRequests, c.get("/a", "X-Forwarded-For", "203.0.113.10, 198.51.100.7").status,
			"the client-written part is ignored")
		assert.Equal(t, http.StatusOK, c.get("/a", "X-Forwarded-For", "198.51.100.8").status, "another client")
	})

	t.Run("an API key never reaches Redis", func(t *testing.T) {
		t.Parallel()
		const secret = "sk_live_Q2hhbmdlTWUhU2VjcmV0"
		ap, c := one(t, Limit{Name: "apikey", Rate: perMinute(1), Keys: []keyfunc.KeyFunc{keyfunc.APIKey("X-API-Key")}})
		assert.Equal(t, []int{200, 429}, c.statuses(2, "/a", "X-API-Key", secret))
		assert.Equal(t, []int{200}, c.statuses(1, "/a", "X-API-Key", secret+"2"))
		keys, err := b.keys(context.Background())
		require.NoError(t, err)
		found := 0
		for _, k := range keys {
			if strings.Contains(k, "apikey:") {
				found++
			}
			assert.NotContains(t, k, "Q2hhbmdlTWUhU2VjcmV0", "raw API key in %q", k)
			assert.NotContains(t, k, "sk_live", "raw API key in %q", k)
		}
		assert.Positive(t, found, "the limiter keys exist")
		_ = ap
	})

	t.Run("a route key counts HEAD with GET, and no method buys another budget", func(t *testing.T) {
		t.Parallel()
		route := []keyfunc.KeyFunc{keyfunc.Route()}
		_, c := app(t, nil, Route{Path: "/items/{id}", Limits: []Limit{{Name: "route", Rate: perMinute(3), Keys: route}}})
		served := 0
		for _, method := range []string{"GET", "HEAD", "HEAD", "BREW", "PURGE", "HEAD", "GET", "BREW"} {
			r := c.send(context.Background(), method, "/items/"+strconv.Itoa(served))
			if r.status >= 200 && r.status < 300 {
				served++
			}
		}
		for _, status := range c.statuses(4, "/items/x") {
			if status == http.StatusOK {
				served++
			}
		}
		assert.Equal(t, 3, served, "3 a minute on the route, whatever the methods (HEAD, where the framework routes it to GET, with GET)")
	})

	t.Run("a rate function cannot change the window", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		ap, c := one(t, Limit{Name: "window", Rate: core.PerHour(5), Keys: user, OnError: ErrorObserve,
			Tiers: map[string]core.Rate{"burst": core.PerSecond(100), "client": {Type: core.PerClient, Permits: 100, Interval: time.Hour}}})
		served := 0
		for i := range 16 {
			tier := []string{"", "burst", "", "client"}[i%4]
			if c.get("/a", HeaderUser, "alternating", HeaderTier, tier).status == http.StatusOK {
				served++
			}
		}
		assert.Equal(t, 5, served, "a rate of another window is refused: every request counts against 5 an hour")
		errs := drain(ap.Errors)
		require.NotEmpty(t, errs)
		assert.ErrorIs(t, errs[0], core.ErrInvalidRate)
	})

	t.Run("a plan upgrade is served at once, whatever was denied before", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		_, c := one(t, Limit{Name: "upgrade", Rate: perMinute(1), Keys: user, Tiers: map[string]core.Rate{"pro": perMinute(10)}})
		assert.Equal(t, []int{200, 429, 429}, c.statuses(3, "/a", HeaderUser, "upgrader"))
		assert.Equal(t, []int{200, 200}, c.statuses(2, "/a", HeaderUser, "upgrader", HeaderTier, "pro"),
			"the denial at the old plan's rate does not stand at the new one's")
	})

	t.Run("a client choosing its costs cannot make Redis walk the log", func(t *testing.T) {
		t.Parallel()
		ap, c := one(t, Limit{Name: "tokens", Rate: perMinute(10_000), CostHeader: true})
		// The log of the client's limiter holds 10 000 grants of a permit.
		name := ap.Prefix + "tokens:" + keyfunc.Escape(a.Peer.String())
		require.Equal(t, http.StatusOK, c.get("/a", HeaderCost, "1").status)
		fill(t, b.rdb, permitsKey(ap, "tokens", a.Peer.String()), 9_999)
		require.NoError(t, b.rdb.Set(context.Background(), strings.TrimSuffix(permitsKey(ap, "tokens", a.Peer.String()), "permits")+"value",
			0, 2*time.Minute).Err())
		calls := countScripts(b.rdb, name)
		first := c.get("/a", HeaderCost, "5000")
		require.Equal(t, http.StatusTooManyRequests, first.status)
		retry, err := strconv.Atoi(first.header.Get("Retry-After"))
		require.NoError(t, err)
		// The instant the first Retry-After names is within a second after
		// the permits' (it is rounded up), from the request's start.
		firstAt := first.start.Add(time.Duration(retry) * time.Second)
		sent := calls.Load()
		for cost := 5001; cost < 5020; cost++ {
			r := c.get("/a", HeaderCost, strconv.Itoa(cost))
			require.Equal(t, http.StatusTooManyRequests, r.status)
			later, err := strconv.Atoi(r.header.Get("Retry-After"))
			require.NoError(t, err)
			at := r.start.Add(r.elapsed + time.Duration(later)*time.Second)
			assert.True(t, at.After(firstAt.Add(-time.Second)), "never earlier than for fewer permits: %v then %v", firstAt, at)
		}
		// Each denial reads at most the log's oldest grants (core's
		// TestDenialWorkDoesNotGrowWithTheLog): one bounded call a request
		// at most, none where the denial cache answers (an exact retry).
		assert.LessOrEqual(t, calls.Load()-sent, int64(19), "no call but the request's own")
	})

	t.Run("a key of another type fails its own client alone", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		ap, c := one(t, Limit{Name: "poison", Rate: perMinute(100), Keys: user, OnError: ErrorObserve})
		cfg := ap.Prefix + "poison:" + keyfunc.Escape("mallory")
		require.NoError(t, b.rdb.Set(context.Background(), cfg, "not a limiter's config", 0).Err())
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			statuses = map[string][]int{}
		)
		for _, u := range []string{"mallory", "alice", "bob", "carol"} {
			for range 8 {
				wg.Go(func() {
					r := c.get("/a", HeaderUser, u)
					mu.Lock()
					statuses[u] = append(statuses[u], r.status)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		errs := drain(ap.Errors)
		require.Len(t, errs, 8, "mallory's 8 requests, each reported")
		for _, err := range errs {
			assert.ErrorIs(t, err, core.ErrInvalidConfig)
		}
		for _, u := range []string{"mallory", "alice", "bob", "carol"} {
			assert.Equal(t, repeat(http.StatusOK, 8), statuses[u], "%s: decided (mallory in memory, at the process's share)", u)
		}
		kind, err := b.rdb.Type(context.Background(), cfg).Result()
		require.NoError(t, err)
		assert.Equal(t, "string", kind, "the poisoned key is left as it was")
	})

	runConcurrency(t, a, b, app, failing)
	runQuota(t, a, b, app, failing, stalls)

	t.Run("user ids cannot collide with other users or policies", func(t *testing.T) {
		t.Parallel()
		user := []keyfunc.KeyFunc{keyfunc.User(a.UserKey)}
		_, c := app(t, nil,
			Route{Path: "/p", Limits: []Limit{{Name: "p", Rate: perMinute(1), Keys: user}}},
			Route{Path: "/q", Limits: []Limit{{Name: "p:x", Rate: perMinute(1), Keys: user}}},
		)
		ids := []string{"a", "a:x", "a*", "{a}", "a}", "{a", "a%3Ax", "a:x:", "*", ":", "a b", "ä"}
		for _, id := range ids {
			assert.Equal(t, http.StatusOK, c.get("/p", HeaderUser, id).status, "first request of %q", id)
		}
		for _, id := range ids {
			assert.Equal(t, http.StatusTooManyRequests, c.get("/p", HeaderUser, id).status, "second request of %q", id)
		}
		// Policy "p" with user "x:y" and policy "p:x" with user "y".
		assert.Equal(t, http.StatusOK, c.get("/p", HeaderUser, "x:y").status)
		assert.Equal(t, http.StatusOK, c.get("/q", HeaderUser, "y").status)
	})
}

// permitsKey is the log of the limiter of policy name and key, in ap
// (Redisson's naming: "{N}:permits", or "N:permits" when N has a hash tag).
func permitsKey(ap App, name, key string) string {
	n := ap.Prefix + keyfunc.Escape(name) + ":" + keyfunc.Escape(key)
	if strings.Contains(n, "{") {
		return n + ":permits"
	}
	return "{" + n + "}:permits"
}

// used returns the permits in the log of the limiter of policy name and key.
func used(t *testing.T, b backend, ap App, name, key string) int64 {
	t.Helper()
	ctx := context.Background()
	members, err := b.rdb.ZRange(ctx, permitsKey(ap, name, key), 0, -1).Result()
	require.NoError(t, err)
	var n int64
	for _, m := range members {
		if len(m) == 21 {
			n += int64(m[17]) | int64(m[18])<<8 | int64(m[19])<<16 | int64(m[20])<<24
		}
	}
	return n
}

var errBrokenKey = errors.New("the key store is down")

// Recorder is an observe.Observer that keeps what it is told.
type Recorder struct {
	mu          sync.Mutex
	decisions   []observe.Decision
	transitions []bool
	starts      []time.Time // when each start of the fallback was reported
	held        int64       // the slots held now, as Held reports them
}

func (r *Recorder) Decision(_ context.Context, d observe.Decision) {
	r.mu.Lock()
	r.decisions = append(r.decisions, d)
	r.mu.Unlock()
}

func (r *Recorder) Fallback(_ string, active bool) {
	r.mu.Lock()
	r.transitions = append(r.transitions, active)
	if active {
		r.starts = append(r.starts, time.Now())
	}
	r.mu.Unlock()
}

func (r *Recorder) Held(_ string, delta int64) {
	r.mu.Lock()
	r.held += delta
	r.mu.Unlock()
}

// HeldNow returns the slots held now, by what Held reported.
func (r *Recorder) HeldNow() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// Count returns the decisions of outcome o.
func (r *Recorder) Count(o observe.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.decisions {
		if d.Outcome == o {
			n++
		}
	}
	return n
}

// Last returns the last decision.
func (r *Recorder) Last() observe.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.decisions) == 0 {
		return observe.Decision{Outcome: 255}
	}
	return r.decisions[len(r.decisions)-1]
}

// Transitions returns the fallback's changes, in order.
func (r *Recorder) Transitions() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.transitions...)
}

// Starts returns when the fallback's starts were reported, in order.
func (r *Recorder) Starts() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.starts...)
}

// Failures returns the distinct errors of the decisions that Redis could
// not make, with how many decisions got each, in the order first seen.
func (r *Recorder) Failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	seen := map[string]int{}
	for _, d := range r.decisions {
		if !d.RedisFailed || d.Err == nil {
			continue
		}
		msg := d.Err.Error()
		if _, ok := seen[msg]; !ok {
			out = append(out, msg)
		}
		seen[msg]++
	}
	for i, msg := range out {
		out[i] = fmt.Sprintf("%dx %s", seen[msg], msg)
	}
	return out
}

// fill writes n grants of one permit, made within the last second, into the
// log key.
func fill(t *testing.T, rdb redis.UniversalClient, key string, n int) {
	t.Helper()
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	for start := 0; start < n; start += 1000 {
		var zs []redis.Z
		for i := start; i < min(start+1000, n); i++ {
			m := make([]byte, 21)
			m[0] = 0x10
			binary.LittleEndian.PutUint64(m[1:], rand.Uint64())
			binary.LittleEndian.PutUint64(m[9:], rand.Uint64())
			binary.LittleEndian.PutUint32(m[17:], 1)
			zs = append(zs, redis.Z{Score: float64(now.UnixMilli() - 1000 + int64(i)*1000/int64(n)), Member: string(m)})
		}
		require.NoError(t, rdb.ZAdd(ctx, key, zs...).Err())
	}
}

// countScripts counts, from now on, the script calls rdb sends on the keys
// of the limiter name: a hook on rdb, for the rest of the test binary.
func countScripts(rdb redis.UniversalClient, name string) *atomic.Int64 {
	h := &scriptCounter{name: name}
	rdb.AddHook(h)
	return &h.n
}

type scriptCounter struct {
	name string
	n    atomic.Int64
}

func (h *scriptCounter) count(cmd redis.Cmder) {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return
	}
	for _, arg := range cmd.Args() {
		if s, ok := arg.(*string); ok && strings.Contains(*s, h.name) || arg == h.name {
			h.n.Add(1)
			return
		}
	}
}

func (*scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}
