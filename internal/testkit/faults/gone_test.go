package faults_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// TestAClientThatLeavesIsStillDecidedByRedis: a request whose client goes
// away while Redis decides it (Go's server also reports a client that
// only closes its sending side, and still reads, so) gets Redis's
// decision, whatever the limit and the failure policy. Its round trip
// ended with the request's context, and it was decided in memory, as if
// Redis had failed: a client at its limit was served over it, by every
// process, while Redis answered.
func TestAClientThatLeavesIsStillDecidedByRedis(t *testing.T) {
	s := startRedis(t)
	limits := []struct {
		name string
		new  func(c *core.Client, name string, opts ...policy.Option) *policy.Policy
	}{
		{"rate", func(c *core.Client, name string, opts ...policy.Option) *policy.Policy {
			return policy.MustNew(c, name, core.PerMinute(1), opts...)
		}},
		{"quota", func(c *core.Client, name string, opts ...policy.Option) *policy.Policy {
			return policy.MustNewQuota(c, name, core.Quota{Limit: 1, Period: core.Day}, opts...)
		}},
		{"concurrency", func(c *core.Client, name string, opts ...policy.Option) *policy.Policy {
			return policy.MustNewConcurrency(c, name, 1, opts...)
		}},
	}
	failures := []struct {
		name string
		opt  policy.Option
	}{{"fail local", policy.WithFailLocal(1)}, {"fail open", policy.WithFailOpen()}, {"fail closed", policy.WithFailClosed()}}
	n := 0
	for _, l := range limits {
		for _, f := range failures {
			n++
			name := "leaves" + strconv.Itoa(n)
			t.Run(l.name+", "+f.name, func(t *testing.T) {
				t.Parallel()
				var served atomic.Int64
				held, release := make(chan struct{}), make(chan struct{})
				ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					served.Add(1)
					if r.Header.Get("X-Hold") != "" { // holds its slot
						close(held)
						<-release
					}
					_, _ = w.Write([]byte("ok"))
				})
				// Two processes: what one granted, the other knows only
				// from Redis.
				hook := heldReply{hold: new(atomic.Bool), left: make(chan struct{})}
				var procs [2]http.Handler
				for i := range procs {
					rdb := newRedis(t, &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
					rdb.AddHook(hook)
					procs[i] = nethttprl.New(l.new(newClient(t, rdb), name, f.opt, policy.WithTimeout(time.Second)))(ok)
				}
				do := func(h http.Handler, ctx context.Context, hold bool) int {
					req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://svc/", nil)
					req.RemoteAddr = "10.0.0.1:40000"
					if hold {
						req.Header.Set("X-Hold", "1")
					}
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					return w.Code
				}
				// The client uses its one permit, or holds its one slot.
				first := make(chan int, 1)
				go func() { first <- do(procs[0], bg, l.name == "concurrency") }()
				if l.name == "concurrency" {
					<-held
				} else {
					require.Equal(t, http.StatusOK, <-first)
				}

				// Its next request, to the other process, whose client
				// leaves while Redis decides it.
				ctx, cancel := context.WithCancel(bg)
				time.AfterFunc(50*time.Millisecond, func() { cancel(); close(hook.left) })
				hook.hold.Store(true)
				assert.Equal(t, http.StatusTooManyRequests, do(procs[1], ctx, false), "Redis's answer")
				assert.False(t, hook.hold.Load(), "its script ran")
				assert.EqualValues(t, 1, served.Load(), "the client over its limit was not served")
				if l.name == "concurrency" {
					close(release)
					require.Equal(t, http.StatusOK, <-first)
				}
			})
		}
	}
}

// heldReply is a go-redis hook that, once hold is set, runs the next
// command (or pipeline) and holds its reply until left is closed (the
// client of the call's request went away); then it gives the reply as
// go-redis does: the call context's error if that context ended with the
// request's, else Redis's answer.
type heldReply struct {
	hold *atomic.Bool
	left chan struct{}
}

func (heldReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h heldReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.hold.CompareAndSwap(true, false) {
			<-h.left
			if ctxErr := ctx.Err(); ctxErr != nil {
				cmd.SetErr(ctxErr)
				return ctxErr
			}
		}
		return err
	}
}

func (h heldReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.hold.CompareAndSwap(true, false) {
			<-h.left
			if ctxErr := ctx.Err(); ctxErr != nil {
				for _, cmd := range cmds {
					cmd.SetErr(ctxErr)
				}
				return ctxErr
			}
		}
		return err
	}
}
