// Package otel reports redlimit's decisions as OpenTelemetry metrics, on
// the OpenTelemetry metric API. It is a module of its own, so that the
// redlimit module does not depend on OpenTelemetry.
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
package otel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redlimit/redlimit/observe"
)

// Observer is an observe.Observer that records OpenTelemetry metrics. It
// is safe for concurrent use; once a policy's attribute sets exist (after
// its first decision) it builds none per decision.
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
	for _, oc := range observe.Outcomes() {
		p.outcomes = append(p.outcomes, []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("policy", policy), attribute.String("outcome", oc.String())))})
	}
	actual, _ := o.policies.LoadOrStore(policy, p)
	return actual.(*policyOptions)
}

// Decision records d, in the request's context ctx.
func (o *Observer) Decision(ctx context.Context, d observe.Decision) {
	p := o.options(d.Policy)
	if int(d.Outcome) < len(p.outcomes) {
		o.decisions.Add(ctx, 1, p.outcomes[d.Outcome]...)
	}
	o.duration.Record(ctx, d.Latency.Seconds(), p.record...)
	if d.RedisFailed {
		o.errors.Add(ctx, 1, p.add...)
	}
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
