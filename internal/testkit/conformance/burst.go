package conformance

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

// A burst on a healthy Redis: a global limit of 100 a minute per client
// address, then a login limit of 1 per 2 s in wait mode up to 3 s; 750
// addresses send 8 requests each, all at once (6 000 concurrent requests),
// on a real redis-server.
const (
	burstSettle    = 15 * time.Second // for what this process owes Redis to reach it
	burstAddresses = 750
	burstPerAddr   = 8
	burstInterval  = 2 * time.Second
	burstMaxWait   = 3 * time.Second
	// burstInTime is how many grants Redis must make in time for the
	// burst to show that requests wait (a run that passes makes hundreds).
	burstInTime = 50
	// burstSilence is how long Redis may take to answer a PING of another
	// process before the fallback may start: a third of the core's grace
	// (a second and more without an answer to a PING of its own on a new
	// connection, which waits up to three turns of Redis's event loop to
	// be accepted, read and answered, where the other process's waits one).
	burstSilence = 350 * time.Millisecond
	// burstOutageLag is how long after a silence of Redis ends the core may
	// still start the outage that the silence began: its round trip waits
	// a second past its deadline, then its PING another.
	burstOutageLag = 2 * time.Second
)

// burstGlobal's window outlasts the test, so that every grant of the burst
// still counts when the logs are checked, however long a busy process took
// to write them.
var burstGlobal = core.PerMinute(100)

// RunBurst sends the burst through the handler that build makes: it must
// apply the policies ps in their order (global, then login) with the
// adapter's middleware, and an error handler that calls onError with the
// request's RemoteAddr. It runs in this process (no sockets), once with the
// default failure policy (the local fallback) and once with fail open, and
// checks that this process's overload is neither taken for a dead Redis
// nor turns the limit off:
//
//   - the fallback never starts (the observer sees no change) but while
//     Redis leaves a PING of another process unanswered for burstSilence
//     or more, or burstOutageLag after (on a machine whose other processes
//     starve Redis of CPU, it may), and requests still wait for their
//     permits and get them (judged when Redis granted at least burstInTime
//     requests in time);
//   - judged by the times Redis recorded (each address's log, read while
//     the burst runs and after it until the grants of calls answered too
//     late are given back, which holds Redis's grants and the local grants
//     written into it afterwards), no address gets more than the login
//     limit in any window, plus, with the default, what the fallback's
//     share allows (1 per window) for a call that got no answer in time,
//     and, with fail open, the requests served because their decision
//     failed, each reported to the error handler;
//   - no refund is lost: every request the login limit refused gave its
//     global permit back, so each address's global log holds exactly its
//     served requests, and the counter agrees.
func RunBurst(t *testing.T, build func(ps []*policy.Policy, onError func(remoteAddr string)) http.Handler) {
	redistest.Need(t)
	server := redistest.Shared(t)
	rdb := server.Client(t)
	refunded := &refundLog{members: map[string]int64{}}
	rdb.AddHook(refunded)
	for _, failure := range []Failure{FailDefault, FailOpen} {
		name := map[Failure]string{FailDefault: "default", FailOpen: "fail open"}[failure]
		t.Run(name, func(t *testing.T) {
			prefix := t.Name() + "." + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			c, err := core.New(rdb, core.WithKeyPrefix(prefix))
			require.NoError(t, err)
			answers := redistest.WatchAnswers(t, server.Addr) // before any goroutine: it may end the test
			obs := &Recorder{}
			opts := []policy.Option{policy.WithObserver(obs)}
			if failure == FailOpen {
				opts = append(opts, policy.WithFailOpen())
			}
			global := policy.MustNew(c, "global", burstGlobal, opts...)
			login := policy.MustNew(c, "login", core.Rate{Permits: 1, Interval: burstInterval},
				append(opts, policy.WithWait(burstMaxWait))...)
			var mu sync.Mutex
			errorsOf := map[string]int{}
			h := build([]*policy.Policy{global, login}, func(addr string) { mu.Lock(); errorsOf[addr]++; mu.Unlock() })

			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				served  = map[string]int{}
				statusN = map[int]int{}
				addrs   []string
			)
			for a := range burstAddresses {
				addrs = append(addrs, "10.1."+strconv.Itoa(a/250)+"."+strconv.Itoa(a%250+1))
			}
			begin := time.Now()
			for _, ip := range addrs {
				for range burstPerAddr {
					wg.Go(func() {
						req := httptest.NewRequest(http.MethodPost, "/login", nil)
						req.RemoteAddr = ip + ":4000"
						w := httptest.NewRecorder()
						<-start
						h.ServeHTTP(w, req)
						mu.Lock()
						defer mu.Unlock()
						statusN[w.Code]++
						if w.Code == http.StatusOK {
							served[ip]++
						}
					})
				}
			}
			// The grants Redis counts, with their times: each address's
			// login log, read every 100 ms (a grant stays in the log for
			// the 2 s interval, and one given back leaves it a second or
			// more after the call that took it) and again once what this
			// process owes Redis is written.
			logs := newGrantLog(rdb, prefix, "login", burstInterval, addrs)
			logs.refunded = refunded
			stop := make(chan struct{})
			reading := make(chan struct{})
			go func() {
				defer close(reading)
				for {
					logs.read(t)
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}()
			close(start)
			wg.Wait()
			elapsed := time.Since(begin)
			// What is owed goes out every 100 ms; a refund of a call that
			// got no answer in time, a second after it (half the login
			// interval): the reads go on until then.
			time.Sleep(1500 * time.Millisecond)
			close(stop)
			<-reading
			logs.read(t)
			t.Logf("%d requests in %v: statuses %v; outcomes: allowed %d, waited %d, denied %d, fallback %d/%d, shed %d, error served %d",
				burstAddresses*burstPerAddr, elapsed.Round(time.Millisecond), statusN,
				obs.Count(observe.Allowed), obs.Count(observe.WaitedAllowed), obs.Count(observe.Denied),
				obs.Count(observe.FallbackAllowed), obs.Count(observe.FallbackDenied), obs.Count(observe.Shed),
				obs.Count(observe.ErrorServed))
			silences, err := answers.Silences()
			require.NoError(t, err)
			var longest time.Duration // of those of 100 ms or more
			for _, s := range silences {
				longest = max(longest, s.To.Sub(s.From))
			}
			t.Logf("the longest silence of Redis to another process's PINGs: %v (0: none of 100 ms)", longest.Round(time.Millisecond))
			for _, at := range obs.Starts() {
				if excused(at, silences) {
					t.Logf("the fallback started at %v, in or just after a silence of Redis", at.Format(time.TimeOnly+".000"))
				} else {
					t.Errorf("a busy process is not a dead Redis: the fallback started at %v, while Redis answered another process (silences: %v)",
						at.Format(time.TimeOnly+".000"), silences)
				}
			}
			if t.Failed() {
				failures := obs.Failures()
				t.Logf("why Redis did not decide (%d kinds): %v", len(failures), failures[:min(len(failures), 10)])
			}
			// A wait needs Redis's answer in time: when the process was so
			// busy that Redis granted almost nothing in time (all but a few
			// calls decided in memory, at the process's share), there was
			// nothing to wait for. (Denials do not count: the denial cache
			// answers them from memory, from replies that came late too.)
			if inTime := obs.Count(observe.Allowed) + obs.Count(observe.WaitedAllowed); inTime >= burstInTime {
				assert.Positive(t, obs.Count(observe.WaitedAllowed), "requests still wait for their permits")
			} else {
				t.Logf("waits not judged: Redis granted %d requests in time (fewer than %d), this process was too busy for any", inTime, burstInTime)
			}

			// Judged once the grants of calls answered too late are given
			// back: a refund waits a second or more past its call's round
			// trip, which a starved process ends late, so the logs are read
			// again until they pass, or burstSettle has passed.
			var worst int
			var failures []string
			for deadline := time.Now().Add(burstSettle); ; time.Sleep(100 * time.Millisecond) {
				logs.read(t)
				worst, failures = 0, failures[:0]
				for _, ip := range addrs {
					at := logs.times(ip)
					most := 0
					for _, a := range at {
						n := 0
						for _, b := range at {
							if b >= a && b < a+burstInterval.Milliseconds() {
								n++
							}
						}
						most = max(most, n)
					}
					worst = max(worst, most)
					// The limit, and the fallback's share of it: a call with no
					// answer in time is decided in memory, under fail open too
					// (a busy process never turns limiting off).
					if allowed := 1 + 1; most > allowed {
						failures = append(failures, fmt.Sprintf("%s: %d login grants in one window, more than %d", ip, most, allowed))
					}
					if failure == FailOpen {
						// Served without a grant in the log: the requests served
						// because Redis failed, each reported, and the local
						// fallback's grants (at most one per window of the
						// burst) that this process, too busy, could not write
						// before their window passed, when they no longer count.
						windows := int(elapsed/burstInterval) + 2
						if beyond := served[ip] - len(at); beyond > errorsOf[ip+":4000"]+windows {
							failures = append(failures, fmt.Sprintf("%s: %d served beyond its %d grants (%d errors reported)",
								ip, beyond, len(at), errorsOf[ip+":4000"]))
						}
					}
				}
				if len(failures) == 0 || time.Now().After(deadline) {
					break
				}
			}
			for _, f := range failures[:min(len(failures), 10)] {
				t.Error(f)
			}
			refunded.mu.Lock()
			t.Logf("most login grants to one address in one window: %d (grants given back so far: %d)", worst, len(refunded.members))
			refunded.mu.Unlock()
			assert.Positive(t, statusN[http.StatusOK], "the burst is served within the limit")

			// No refund lost: each global log holds no grant but those of
			// served requests (with fail open, a request served without a
			// decision has none), and the counter agrees with the log.
			gl := newGrantLog(rdb, prefix, "global", burstGlobal.Interval, addrs)
			// Read here, not in assert.Eventually's goroutine, which may
			// outlive its timeout.
			var wrong, late []string
			for deadline := time.Now().Add(burstSettle); ; time.Sleep(100 * time.Millisecond) {
				gl.read(t)
				wrong, late = wrong[:0], late[:0]
				for _, ip := range addrs {
					n := gl.current(t, ip)
					if n > int64(served[ip]) || failure != FailOpen && n != int64(served[ip]) {
						// A grant that Redis wrote after its refund was sent
						// (by Redis's clock, the score): beyond the wait the
						// refund makes, which the docs bound.
						if b := refunded.before(gl, ip); n > int64(served[ip]) && n-int64(served[ip]) <= int64(b) {
							late = append(late, fmt.Sprintf("%s: %d in the log, %d served, %d written after their refunds", ip, n, served[ip], b))
							continue
						}
						wrong = append(wrong, fmt.Sprintf("%s: %d in the log, %d served", ip, n, served[ip]))
					}
				}
				if len(wrong) == 0 && len(late) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(late) > 0 {
				t.Logf("grants of refused requests that Redis wrote after their refunds were sent, so late that no refund waits for them (%d addresses): %v",
					len(late), late[:min(len(late), 10)])
			}
			if len(wrong) > 0 {
				t.Errorf("the global logs hold the served requests' grants within %v, but for %d addresses: %v",
					burstSettle, len(wrong), wrong[:min(len(wrong), 10)])
			}
			// Read at one instant: a charge or refund still owed may land
			// between two reads, and every script keeps them in step.
			for _, ip := range addrs {
				base := "{" + prefix + "global:" + keyfunc.Escape(ip) + "}:"
				st, err := readState.Run(context.Background(), rdb, []string{base + "value", base + "permits"}).Slice()
				require.NoError(t, err)
				v := burstGlobal.Permits // no counter: no permit out
				if st[0] != "" {
					v, err = strconv.ParseInt(st[0].(string), 10, 64)
					require.NoError(t, err)
				}
				var logged int64
				for _, m := range st[1].([]any) {
					logged += permitsOf(m.(string))
				}
				if !assert.Equal(t, burstGlobal.Permits-logged, v, "%s: the counter agrees with the log", ip) {
					break
				}
			}
		})
	}
}

// grantLog collects the grants in the logs of one policy's limiters in a
// burst: member and score (the Redis time of the grant, in ms), per
// address.
type grantLog struct {
	rdb      redis.UniversalClient
	interval time.Duration
	keys     map[string]string // address -> its log's key
	grants   map[string]map[string]int64
	gone     map[string]map[string]bool  // given back: left the log before its window passed
	last     map[string]int64            // address -> permits in its log at the last read
	present  map[string]map[string]int64 // address -> the members in its log at the last read, and their scores
	refunded *refundLog                  // the grants given back, if known
}

func newGrantLog(rdb redis.UniversalClient, prefix, policyName string, interval time.Duration, addrs []string) *grantLog {
	g := &grantLog{rdb: rdb, interval: interval, keys: map[string]string{}, grants: map[string]map[string]int64{},
		gone: map[string]map[string]bool{}, last: map[string]int64{}, present: map[string]map[string]int64{}}
	for _, ip := range addrs {
		g.keys[ip] = "{" + prefix + policyName + ":" + keyfunc.Escape(ip) + "}:permits"
		g.grants[ip] = map[string]int64{}
		g.gone[ip] = map[string]bool{}
	}
	return g
}

// current returns the permits in an address's log at the last read.
func (g *grantLog) current(_ *testing.T, ip string) int64 { return g.last[ip] }

// readState returns a limiter's counter (KEYS[1], "" when missing) and
// the members of its log (KEYS[2]), read at one instant.
var readState = redis.NewScript(`
return { redis.call('GET', KEYS[1]) or '', redis.call('ZRANGE', KEYS[2], 0, -1) }
`)

// permitsOf returns the permits of a log member (Redisson's layout: its
// last four bytes, little-endian), 0 for a member of another form.
func permitsOf(m string) int64 {
	if len(m) != 21 {
		return 0
	}
	return int64(m[17]) | int64(m[18])<<8 | int64(m[19])<<16 | int64(m[20])<<24
}

// readLogs returns Redis's time, in ms, and the members and scores of
// every log in KEYS, read at that time.
var readLogs = redis.NewScript(`
local t = redis.call('TIME')
local out = { tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) }
for _, k in ipairs(KEYS) do
  out[#out + 1] = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
end
return out
`)

// read adds what the logs hold now. A grant gone from its log before its
// window passed, by Redis's clock at the read (so that a read this busy
// process makes late is judged right), was given back.
func (g *grantLog) read(t *testing.T) {
	ips := make([]string, 0, len(g.keys))
	keys := make([]string, 0, len(g.keys))
	for ip, k := range g.keys {
		ips, keys = append(ips, ip), append(keys, k)
	}
	v, err := readLogs.Run(context.Background(), g.rdb, keys).Slice()
	if !assert.NoError(t, err) { // not require: this may run in a goroutine
		return
	}
	now := v[0].(int64)
	for i, ip := range ips {
		var permits int64
		present := map[string]int64{}
		zs := v[i+1].([]any)
		for j := 0; j+1 < len(zs); j += 2 {
			m := zs[j].(string)
			score, _ := strconv.ParseFloat(zs[j+1].(string), 64)
			present[m] = int64(score)
			g.grants[ip][m] = int64(score)
			permits += permitsOf(m)
		}
		for m, at := range g.grants[ip] {
			if _, ok := present[m]; !ok && now < at+g.interval.Milliseconds() {
				g.gone[ip][m] = true // refunded: the grant of a call answered too late
			}
		}
		g.last[ip] = permits
		g.present[ip] = present
	}
}

// times returns the times of an address's grants, in ms, but for those
// given back.
func (g *grantLog) times(ip string) []int64 {
	var out []int64
	for m, at := range g.grants[ip] {
		if !g.gone[ip][m] && (g.refunded == nil || !g.refunded.has(m)) {
			out = append(out, at)
		}
	}
	return out
}

// refundLog is a go-redis hook that records the log members of the refunds
// sent through its client: the grants of calls that got no answer in time,
// which their requests did not use. A reader of the logs may miss a refund
// (it sees the grant, then not again only once its window has passed) when
// this process is too busy to read often: the member says it for sure.
type refundLog struct {
	mu      sync.Mutex
	members map[string]int64 // member -> when its first refund was sent, unix ms
}

func (r *refundLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *refundLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.note(cmd)
		return next(ctx, cmd)
	}
}

func (r *refundLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.note(cmd)
		}
		return next(ctx, cmds)
	}
}

// note records the members that cmd gives back, if it is a script call
// that does: a refund is a settle to 0 permits, the triple (the settled
// member, of 0 permits; ""; the member it takes out) among the arguments.
func (r *refundLog) note(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 3 || args[0] != "evalsha" && args[0] != "eval" {
		return
	}
	for i := 3; i+2 < len(args); i++ {
		settled, ok1 := args[i].(string)
		empty, ok2 := args[i+1].(string)
		old, ok3 := args[i+2].(string)
		if ok1 && ok2 && ok3 && len(settled) == 21 && empty == "" && len(old) == 21 && settled[17:] == "\x00\x00\x00\x00" {
			r.mu.Lock()
			if _, ok := r.members[old]; !ok {
				r.members[old] = time.Now().UnixMilli()
			}
			r.mu.Unlock()
		}
	}
}

func (r *refundLog) has(member string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.members[member]
	return ok
}

// before returns how many of an address's grants in log g, as last read,
// were written by a script that Redis ran after the grant's refund was
// sent: a call whose script Redis ran later than the refund waits for
// (lateScripts in core: two seconds, or past its round trip's deadline and
// a second more), which only a starved Redis does.
func (r *refundLog) before(g *grantLog, ip string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for m, at := range g.present[ip] {
		if sent, ok := r.members[m]; ok && at > sent {
			n++
		}
	}
	return n
}

// excused reports whether a start of the fallback at at came during a
// silence of Redis of burstSilence or more, or within burstOutageLag
// after one ended: the only starts the burst lets pass.
func excused(at time.Time, silences []redistest.Silence) bool {
	for _, s := range silences {
		if s.To.Sub(s.From) >= burstSilence && !at.Before(s.From) && at.Before(s.To.Add(burstOutageLag)) {
			return true
		}
	}
	return false
}
