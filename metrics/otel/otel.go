// Package otel reports redlimit's decisions to OpenTelemetry: as metrics,
// on the OpenTelemetry metric API, and on the requests' traces. It is a
// module of its own, so that the redlimit module does not depend on
// OpenTelemetry.
//
//	obs, err := otel.New(otelglobal.Meter("redlimit"))
//	r.Use(ginrl.New(policy.MustNew(client, "api", core.PerMinute(100), policy.WithObserver(obs))))
//
// The instruments are those of the Prometheus package, with the same
// names, attributes (policy, and outcome on decisions: never a client key
// or address) and histogram buckets:
//
//	redlimit_decisions_total            Int64Counter      policy, outcome
//	redlimit_decision_duration_seconds  Float64Histogram  policy
//	redlimit_redis_errors_total         Int64Counter      policy
//	redlimit_fallback_active            Int64Gauge        policy, 0 or 1
//	redlimit_slots_held                 Int64UpDownCounter policy: a concurrency limit's slots in use
//
// A decision is recorded with the request's context, so that an SDK that
// keeps exemplars links them to the request's trace.
//
// # Traces
//
// A decision shows on the request's span, when it is recording, as an
// event "redlimit.decision" (attributes policy, outcome, remaining,
// retry_after in seconds when the request was to wait, fallback and
// redis_failed). The Client's round trips to Redis, which may each carry
// the calls of many requests, are spans of their own with RoundTrips:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	if err := redisotel.InstrumentTracing(rdb); err != nil { // go-redis's spans
//		return err
//	}
//	client, err := core.New(rdb, otel.RoundTrips(otelglobal.Tracer("redlimit")))
//
// Each round trip is then a span "redlimit.round_trip", a child of the
// first request it carries and linked to every one, and the spans of
// go-redis's commands are its children.
package otel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/observe"
)

// Observer is an observe.Observer that records OpenTelemetry metrics, and
// each decision on the request's span. It is safe for concurrent use; once
// a policy's attribute sets exist (after its first decision) it builds
// none per decision, but for a span that is recording.
type Observer struct {
	decisions metric.Int64Counter
	duration  metric.Float64Histogram
	errors    metric.Int64Counter
	fallback  metric.Int64Gauge
	held      metric.Int64UpDownCounter
	policies  sync.Map // policy name -> *policyOptions
}

// policyOptions are the options of a policy's measurements, as slices made
// once: a variadic call with options built in place would allocate one.
type policyOptions struct {
	outcomes [][]metric.AddOption // by observe.Outcome
	add      []metric.AddOption
	record   []metric.RecordOption
}

// New returns an Observer whose instruments are created on meter.
func New(meter metric.Meter) (*Observer, error) {
	o := &Observer{}
	var err error
	if o.decisions, err = meter.Int64Counter("redlimit_decisions_total",
		metric.WithDescription("Rate limit decisions, by policy and outcome.")); err != nil {
		return nil, err
	}
	if o.duration, err = meter.Float64Histogram("redlimit_decision_duration_seconds",
		metric.WithDescription("Time a rate limit decision took, waits included."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(observe.LatencyBuckets...)); err != nil {
		return nil, err
	}
	if o.errors, err = meter.Int64Counter("redlimit_redis_errors_total",
		metric.WithDescription("Decisions Redis could not make (down, slow, or overloaded), by policy.")); err != nil {
		return nil, err
	}
	if o.fallback, err = meter.Int64Gauge("redlimit_fallback_active",
		metric.WithDescription("1 while a policy decides in memory because Redis cannot, else 0.")); err != nil {
		return nil, err
	}
	if o.held, err = meter.Int64UpDownCounter("redlimit_slots_held",
		metric.WithDescription("Slots of a concurrency limit that this process's requests hold.")); err != nil {
		return nil, err
	}
	return o, nil
}

// options returns the attribute options of policy, built on first use.
func (o *Observer) options(policy string) *policyOptions {
	if p, ok := o.policies.Load(policy); ok {
		return p.(*policyOptions)
	}
	set := metric.WithAttributeSet(attribute.NewSet(attribute.String("policy", policy)))
	p := &policyOptions{add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
	for oc := observe.Outcome(0); oc.String() != "unknown"; oc++ { // every outcome, in order
		p.outcomes = append(p.outcomes, []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("policy", policy), attribute.String("outcome", oc.String())))})
	}
	actual, _ := o.policies.LoadOrStore(policy, p)
	return actual.(*policyOptions)
}

// Decision records d, in the request's context ctx, and adds it to the
// request's span in ctx, if that is recording, as an event
// "redlimit.decision".
func (o *Observer) Decision(ctx context.Context, d observe.Decision) {
	p := o.options(d.Policy)
	if int(d.Outcome) < len(p.outcomes) {
		o.decisions.Add(ctx, 1, p.outcomes[d.Outcome]...)
	}
	o.duration.Record(ctx, d.Latency.Seconds(), p.record...)
	if d.RedisFailed {
		o.errors.Add(ctx, 1, p.add...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("redlimit.decision", trace.WithAttributes(decisionAttributes(d)...))
	}
}

// decisionAttributes returns the attributes of d's event.
func decisionAttributes(d observe.Decision) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs,
		attribute.String("policy", d.Policy),
		attribute.String("outcome", d.Outcome.String()),
		attribute.Int64("remaining", d.Remaining),
		attribute.Bool("fallback", d.Outcome == observe.FallbackAllowed || d.Outcome == observe.FallbackDenied),
		attribute.Bool("redis_failed", d.RedisFailed))
	if d.RetryAfter != 0 {
		attrs = append(attrs, attribute.Float64("retry_after", d.RetryAfter.Seconds()))
	}
	return attrs
}

// RoundTrips returns a core.Option that makes a span of each round trip of
// the Client to Redis on tracer, named "redlimit.round_trip", with the
// number of requests' calls it carries as attribute calls. A round trip
// may carry the calls of many requests (see core.WithCoalescing): its span
// is a child of the first one's span, and has a link to each one's, so that
// every request's trace leads to the round trip that decided it (a round
// trip carries up to 1024 calls; an SDK keeps 128 links per span unless
// told otherwise, as by OTEL_SPAN_LINK_COUNT_LIMIT). The spans
// of go-redis's commands (redisotel.InstrumentTracing) are its children.
// A round trip that fails as a whole records its error, with the status
// Error. One with no request's call (the Client paying on its own what
// the limiters owe, see core.Limiter.Charge) is a span of its own.
func RoundTrips(tracer trace.Tracer) core.Option {
	return core.WithRoundTripHook(func(ctx context.Context, carried []context.Context) (context.Context, func(error)) {
		links := make([]trace.Link, 0, len(carried))
		for _, c := range carried {
			link := trace.LinkFromContext(c)
			if !link.SpanContext.IsValid() {
				continue
			}
			if len(links) == 0 {
				ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(c))
			}
			links = append(links, link)
		}
		ctx, span := tracer.Start(ctx, "redlimit.round_trip", trace.WithLinks(links...),
			trace.WithAttributes(attribute.Int("calls", len(carried))))
		return ctx, func(err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	})
}

// Fallback records the policy's fallback state.
func (o *Observer) Fallback(policy string, active bool) {
	var v int64
	if active {
		v = 1
	}
	o.fallback.Record(context.Background(), v, o.options(policy).record...)
}

// Held adds delta to the policy's slots held.
func (o *Observer) Held(policy string, delta int64) {
	o.held.Add(context.Background(), delta, o.options(policy).add...)
}

var _ observe.Observer = (*Observer)(nil)
