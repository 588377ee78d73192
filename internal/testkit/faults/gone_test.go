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

// TestARequestWhoseClientLeavesIsNotServed: a request whose context ends
// while Redis decides it (its client went away, which Go's server also
// sees when the client only closes its side of the connection and still
// reads; or its own deadline passed) is refused, whatever the limit and the
// failure policy, and what Redis granted it is given back. It was decided
// in memory, as if Redis had failed: a client at its limit was served over
// it, by every process, while Redis answered.
func TestARequestWhoseClientLeavesIsNotServed(t *testing.T) {
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
	ends := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"client gone", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(bg)
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}},
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(bg, 50*time.Millisecond) }},
	}
	n := 0
	for _, l := range limits {
		for _, f := range failures {
			for _, end := range ends {
				n++
				name := "gone" + strconv.Itoa(n)
				t.Run(l.name+", "+f.name+", "+end.name, func(t *testing.T) {
					// In parallel: a lost grant is given back seconds later
					// (see core.Limiter.Refund).
					t.Parallel()
					var hold atomic.Bool
					rdb := newRedis(t, &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
					rdb.AddHook(answeredUnseen{&hold})
					var served atomic.Int64
					p := l.new(newClient(t, rdb), name, f.opt, policy.WithTimeout(300*time.Millisecond))
					h := nethttprl.New(p)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
						served.Add(1)
						_, _ = w.Write([]byte("ok"))
					}))
					do := func(ctx context.Context, ip string) int {
						req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://svc/", nil)
						req.RemoteAddr = ip + ":40000"
						w := httptest.NewRecorder()
						h.ServeHTTP(w, req)
						return w.Code
					}
					// Another client first: the scripts are loaded, so that
					// the held call is the one that runs.
					require.Equal(t, http.StatusOK, do(bg, "10.0.0.2"))

					ctx, cancel := end.ctx()
					defer cancel()
					hold.Store(true)
					assert.Equal(t, http.StatusServiceUnavailable, do(ctx, "10.0.0.1"))
					assert.False(t, hold.Load(), "its script ran")
					assert.EqualValues(t, 1, served.Load(), "the request that left was not served")

					// Its permit, which Redis granted, is given back: its
					// client is served (the limit is 1).
					waitFor(t, 5*time.Second, "the client served", func() bool { return do(bg, "10.0.0.1") == http.StatusOK })
				})
			}
		}
	}
}

// answeredUnseen is a go-redis hook that, once hold is set, runs the next
// command (or pipeline) and then holds its answer until the caller's
// context ends: Redis decided, and the caller never sees it.
type answeredUnseen struct{ hold *atomic.Bool }

func (answeredUnseen) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h answeredUnseen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.hold.CompareAndSwap(true, false) {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return err
	}
}

func (h answeredUnseen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.hold.CompareAndSwap(true, false) {
			<-ctx.Done()
			for _, cmd := range cmds {
				cmd.SetErr(ctx.Err())
			}
			return ctx.Err()
		}
		return err
	}
}
