// Package prometheus reports redlimit's decisions as Prometheus metrics. It
// is a module of its own, so that the redlimit module does not depend on
// the Prometheus client.
//
//	obs, err := prometheus.New(prom.DefaultRegisterer)
//	r.Use(ginrl.New(policy.MustNew(client, "api", core.PerMinute(100), policy.WithObserver(obs))))
//
// Metrics, labelled by policy name only (never a client key or address):
//
//	redlimit_decisions_total{policy,outcome}       counter
//	redlimit_decision_duration_seconds{policy}     histogram, 50 µs to 1 s
//	redlimit_redis_errors_total{policy}            counter
//	redlimit_fallback_active{policy}               gauge, 0 or 1
//	redlimit_slots_held{policy}                    gauge: a concurrency limit's slots in use
//
// outcome is one of observe.Outcome's names: allowed, denied,
// waited_allowed, error_served, error_rejected, dry_run_denied,
// fallback_allowed, fallback_denied, shed.
package prometheus

import (
	"context"
	"errors"
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/observe"
)

// Observer is an observe.Observer that updates Prometheus metrics. It is
// safe for concurrent use, and does not allocate once a policy's metrics
// exist (after its first decision).
type Observer struct {
	decisions *prom.CounterVec
	duration  *prom.HistogramVec
	errors    *prom.CounterVec
	fallback  *prom.GaugeVec
	held      *prom.GaugeVec
	policies  sync.Map // policy name -> *policyMetrics
}

type policyMetrics struct {
	outcomes [16]prom.Counter // by observe.Outcome
	duration prom.Observer
	errors   prom.Counter
	fallback prom.Gauge
	held     prom.Gauge
}

// New returns an Observer whose metrics are registered with reg (for
// instance prometheus.DefaultRegisterer). Metrics already registered by
// another Observer on reg are reused.
func New(reg prom.Registerer) (*Observer, error) {
	o := &Observer{
		decisions: prom.NewCounterVec(prom.CounterOpts{
			Name: "redlimit_decisions_total",
			Help: "Rate limit decisions, by policy and outcome.",
		}, []string{"policy", "outcome"}),
		duration: prom.NewHistogramVec(prom.HistogramOpts{
			Name:    "redlimit_decision_duration_seconds",
			Help:    "Time a rate limit decision took, waits included.",
			Buckets: observe.LatencyBuckets,
		}, []string{"policy"}),
		errors: prom.NewCounterVec(prom.CounterOpts{
			Name: "redlimit_redis_errors_total",
			Help: "Decisions Redis could not make (down, slow, or overloaded), by policy.",
		}, []string{"policy"}),
		fallback: prom.NewGaugeVec(prom.GaugeOpts{
			Name: "redlimit_fallback_active",
			Help: "1 while a policy decides in memory because Redis cannot, else 0.",
		}, []string{"policy"}),
		held: prom.NewGaugeVec(prom.GaugeOpts{
			Name: "redlimit_slots_held",
			Help: "Slots of a concurrency limit that this process's requests hold.",
		}, []string{"policy"}),
	}
	var err error
	o.decisions, err = register(reg, o.decisions)
	if err == nil {
		o.duration, err = register(reg, o.duration)
	}
	if err == nil {
		o.errors, err = register(reg, o.errors)
	}
	if err == nil {
		o.fallback, err = register(reg, o.fallback)
	}
	if err == nil {
		o.held, err = register(reg, o.held)
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

// register registers c with reg, or returns the collector already there.
func register[C prom.Collector](reg prom.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var already prom.AlreadyRegisteredError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &already):
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// metrics returns the metrics of policy, created on its first decision.
func (o *Observer) metrics(policy string) *policyMetrics {
	if m, ok := o.policies.Load(policy); ok {
		return m.(*policyMetrics)
	}
	m := &policyMetrics{
		duration: o.duration.WithLabelValues(policy),
		errors:   o.errors.WithLabelValues(policy),
		fallback: o.fallback.WithLabelValues(policy),
		held:     o.held.WithLabelValues(policy),
	}
	for oc := observe.Outcome(0); oc.String() != "unknown"; oc++ { // every outcome, in order
		m.outcomes[oc] = o.decisions.WithLabelValues(policy, oc.String())
	}
	actual, _ := o.policies.LoadOrStore(policy, m)
	return actual.(*policyMetrics)
}

// Decision counts d.
func (o *Observer) Decision(_ context.Context, d observe.Decision) {
	m := o.metrics(d.Policy)
	if int(d.Outcome) < len(m.outcomes) && m.outcomes[d.Outcome] != nil {
		m.outcomes[d.Outcome].Inc()
	}
	m.duration.Observe(d.Latency.Seconds())
	if d.RedisFailed {
		m.errors.Inc()
	}
}

// Fallback sets the policy's fallback gauge.
func (o *Observer) Fallback(policy string, active bool) {
	v := 0.0
	if active {
		v = 1
	}
	o.metrics(policy).fallback.Set(v)
}

// Held adds delta to the policy's slots held.
func (o *Observer) Held(policy string, delta int64) { o.metrics(policy).held.Add(float64(delta)) }

var _ observe.Observer = (*Observer)(nil)
