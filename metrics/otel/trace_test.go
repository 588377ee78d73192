package otel_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/metrics/otel"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// requests is how many requests TestTraces makes at once.
const requests = 64

// Requests decided at once share round trips to Redis: each round trip is
// a span, a child of one request's span and linked to every request's
// whose call it carried, and go-redis's spans of its script calls are its
// descendants. Every request's span is carried once, and shows its
// decision.
func TestTraces(t *testing.T) {
	redistest.Need(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rdb := redistest.Shared(t).Client(t)
	require.NoError(t, redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp)))
	gate := &firstScript{callers: requests}
	rdb.AddHook(gate)

	// One round trip at a time: the first holds the others back, which
	// then share the next.
	c, err := core.New(rdb, core.WithCoalescing(1), core.WithKeyPrefix(fmt.Sprintf("traces.%d.", time.Now().UnixNano())),
		otel.RoundTrips(tp.Tracer("redlimit")))
	require.NoError(t, err)
	obs, err := otel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())).Meter("redlimit"))
	require.NoError(t, err)
	p := policy.MustNew(c, "traced", core.PerMinute(1000), policy.WithObserver(obs), policy.WithTimeout(time.Minute))

	tracer := tp.Tracer("test")
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			ctx, span := tracer.Start(context.Background(), "request")
			defer span.End()
			d := p.Decide(&exchange{ctx: ctx})
			assert.NoError(t, d.Err)
			assert.Equal(t, observe.Allowed, d.Outcome)
		})
	}
	wg.Wait()
	assert.True(t, gate.held.Load(), "every request waited for a round trip while the first was held")

	spans := exporter.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var reqs, trips, scripts []tracetest.SpanStub
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		switch {
		case s.Name == "request":
			reqs = append(reqs, s)
		case s.Name == "redlimit.round_trip":
			trips = append(trips, s)
		case isScript(s.Name):
			scripts = append(scripts, s)
		}
	}
	require.Len(t, reqs, requests)
	isRequest := func(sc trace.SpanContext) bool { return byID[sc.SpanID()].Name == "request" }

	// The requests each round trip carried: its parent and its links.
	carried := map[trace.SpanID][]trace.SpanID{} // round trip -> requests
	times := map[trace.SpanID]int{}              // request -> round trips
	several := false
	for _, rt := range trips {
		var got []trace.SpanID
		for _, l := range rt.Links {
			require.True(t, isRequest(l.SpanContext), "a round trip links to requests only")
			got = append(got, l.SpanContext.SpanID())
			times[l.SpanContext.SpanID()]++
		}
		require.NotEmpty(t, got, "every round trip carried a request's call")
		assert.True(t, isRequest(rt.Parent), "a round trip's parent is a request")
		assert.Contains(t, got, rt.Parent.SpanID(), "its parent is one of those it carried")
		assert.Equal(t, rt.Parent.TraceID(), rt.SpanContext.TraceID(), "in its parent's trace")
		assert.Contains(t, rt.Attributes, attribute.Int("calls", len(got)))
		carried[rt.SpanContext.SpanID()] = got
		several = several || len(got) > 1
	}
	assert.True(t, several, "a round trip carried several requests' calls")
	t.Logf("%d requests in %d round trips", len(reqs), len(trips))
	for _, r := range reqs {
		assert.Equal(t, 1, times[r.SpanContext.SpanID()], "request %s carried once", r.SpanContext.SpanID())
	}

	// Every script call's span descends from a round trip, and every round
	// trip has one.
	require.NotEmpty(t, scripts)
	made := map[trace.SpanID]bool{}
	for _, s := range scripts {
		rt, ok := roundTripOf(byID, s)
		if assert.True(t, ok, "span %q descends from a round trip", s.Name) {
			made[rt.SpanContext.SpanID()] = true
			assert.Equal(t, rt.SpanContext.TraceID(), s.SpanContext.TraceID())
		}
	}
	assert.Len(t, made, len(trips), "every round trip made a script call")

	// Every request's span shows its decision.
	for _, r := range reqs {
		var ev *sdktrace.Event
		for i := range r.Events {
			if r.Events[i].Name == "redlimit.decision" {
				ev = &r.Events[i]
			}
		}
		if assert.NotNil(t, ev, "request %s shows its decision", r.SpanContext.SpanID()) {
			assert.Contains(t, ev.Attributes, attribute.String("policy", "traced"))
			assert.Contains(t, ev.Attributes, attribute.String("outcome", "allowed"))
			assert.Contains(t, ev.Attributes, attribute.Bool("fallback", false))
			assert.Contains(t, ev.Attributes, attribute.Bool("redis_failed", false))
		}
	}
}

// A round trip that fails records its error on its span, a child of the
// request's.
func TestRoundTripFailure(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := core.New(rdb, otel.RoundTrips(tp.Tracer("redlimit")))
	require.NoError(t, err)

	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	_, err = c.Limiter("down").TryAcquire(ctx, 1)
	span.End()
	require.ErrorIs(t, err, core.ErrUnavailable)
	var trips []tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.Name == "redlimit.round_trip" {
			trips = append(trips, s)
		}
	}
	require.Len(t, trips, 1)
	assert.Equal(t, span.SpanContext(), trips[0].Parent)
	assert.Equal(t, codes.Error, trips[0].Status.Code)
	require.NotEmpty(t, trips[0].Events)
	assert.Equal(t, "exception", trips[0].Events[0].Name)
}

// isScript reports whether a go-redis span is that of a script call, alone
// or in a pipeline.
func isScript(name string) bool {
	for _, f := range strings.Fields(name) {
		if f == "evalsha" || f == "eval" {
			return true
		}
	}
	return false
}

// roundTripOf returns the round trip span that s descends from.
func roundTripOf(byID map[trace.SpanID]tracetest.SpanStub, s tracetest.SpanStub) (tracetest.SpanStub, bool) {
	for s.Parent.IsValid() {
		var ok bool
		if s, ok = byID[s.Parent.SpanID()]; !ok {
			return s, false
		}
		if s.Name == "redlimit.round_trip" {
			return s, true
		}
	}
	return s, false
}

// firstScript is a go-redis hook that holds the first script call until
// all callers wait for a round trip (core.WithCoalescing(1): the first
// holds the only one), so that the next carries the others: coalescing
// whatever the machine's load.
type firstScript struct {
	callers int
	first   sync.Once
	held    atomic.Bool // all callers waited
}

func (h *firstScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *firstScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h *firstScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(cmds[0].Name())
		return next(ctx, cmds)
	}
}

// hold waits, on the first script call, until every caller is in the
// Client's batcher, waiting for its call's round trip, or 30 s at most.
func (h *firstScript) hold(name string) {
	if !isScript(name) {
		return
	}
	h.first.Do(func() {
		buf := make([]byte, 1<<20)
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
			for {
				n := runtime.Stack(buf, true)
				if n < len(buf) {
					buf = buf[:n]
					break
				}
				buf = make([]byte, 2*len(buf))
			}
			if strings.Count(string(buf), "core.(*batcher).do(") >= h.callers {
				h.held.Store(true)
				return
			}
			buf = buf[:cap(buf)]
		}
	})
}

// exchange is a policy.Exchange of a request with a context only.
type exchange struct{ ctx context.Context }

func (x *exchange) Context() context.Context       { return x.ctx }
func (x *exchange) SetContext(ctx context.Context) { x.ctx = ctx }
func (x *exchange) SetHeader(string, string)       {}
func (x *exchange) Route() (string, error)         { return "", nil }
func (x *exchange) Header(string) string           { return "" }
func (x *exchange) HeaderValues(string) []string   { return nil }
func (x *exchange) Query(string) string            { return "" }
func (x *exchange) RemoteAddr() string             { return "192.0.2.1:1" }
func (x *exchange) Value(key any) any              { return x.ctx.Value(key) }
