package prometheus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlimit/redlimit/metrics/prometheus"
	"github.com/redlimit/redlimit/observe"
)

func TestMetrics(t *testing.T) {
	reg := prom.NewRegistry()
	o, err := prometheus.New(reg)
	require.NoError(t, err)
	for range 3 {
		o.Decision(context.Background(), observe.Decision{Policy: "login", Outcome: observe.Allowed, Permits: 1, Latency: 200 * time.Microsecond})
	}
	o.Decision(context.Background(), observe.Decision{Policy: "login", Outcome: observe.Denied, Permits: 1, RetryAfter: time.Second, Latency: 300 * time.Microsecond})
	o.Decision(context.Background(), observe.Decision{Policy: "api", Outcome: observe.ErrorServed, Latency: 100 * time.Millisecond, Err: errors.New("redis down"), RedisFailed: true})
	o.Fallback("api", true)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP redlimit_fallback_active 1 while a policy decides in memory because Redis cannot, else 0.
# TYPE redlimit_fallback_active gauge
redlimit_fallback_active{policy="api"} 1
redlimit_fallback_active{policy="login"} 0
# HELP redlimit_redis_errors_total Decisions Redis could not make (down, slow, or overloaded), by policy.
# TYPE redlimit_redis_errors_total counter
redlimit_redis_errors_total{policy="api"} 1
redlimit_redis_errors_total{policy="login"} 0
`), "redlimit_fallback_active", "redlimit_redis_errors_total"))

	assert.Equal(t, 3.0, counter(t, reg, "redlimit_decisions_total", "login", "allowed"))
	assert.Equal(t, 1.0, counter(t, reg, "redlimit_decisions_total", "login", "denied"))
	assert.Equal(t, 1.0, counter(t, reg, "redlimit_decisions_total", "api", "error_served"))
	n, err := testutil.GatherAndCount(reg, "redlimit_decisions_total")
	require.NoError(t, err)
	assert.Equal(t, 18, n, "every outcome of both policies, from their first decision")

	o.Fallback("api", false)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP redlimit_fallback_active 1 while a policy decides in memory because Redis cannot, else 0.
# TYPE redlimit_fallback_active gauge
redlimit_fallback_active{policy="api"} 0
redlimit_fallback_active{policy="login"} 0
`), "redlimit_fallback_active"))

	// The histogram: 4 decisions of login, 50 µs to 1 s buckets.
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP redlimit_decision_duration_seconds Time a rate limit decision took, waits included.
# TYPE redlimit_decision_duration_seconds histogram
redlimit_decision_duration_seconds_bucket{policy="api",le="5e-05"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.0001"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.00025"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.0005"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.001"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.0025"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.005"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.01"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.025"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.05"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.09"} 0
redlimit_decision_duration_seconds_bucket{policy="api",le="0.125"} 1
redlimit_decision_duration_seconds_bucket{policy="api",le="0.25"} 1
redlimit_decision_duration_seconds_bucket{policy="api",le="0.5"} 1
redlimit_decision_duration_seconds_bucket{policy="api",le="1"} 1
redlimit_decision_duration_seconds_bucket{policy="api",le="+Inf"} 1
redlimit_decision_duration_seconds_sum{policy="api"} 0.1
redlimit_decision_duration_seconds_count{policy="api"} 1
redlimit_decision_duration_seconds_bucket{policy="login",le="5e-05"} 0
redlimit_decision_duration_seconds_bucket{policy="login",le="0.0001"} 0
redlimit_decision_duration_seconds_bucket{policy="login",le="0.00025"} 3
redlimit_decision_duration_seconds_bucket{policy="login",le="0.0005"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.001"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.0025"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.005"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.01"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.025"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.05"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.09"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.125"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.25"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="0.5"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="1"} 4
redlimit_decision_duration_seconds_bucket{policy="login",le="+Inf"} 4
redlimit_decision_duration_seconds_sum{policy="login"} 0.0009
redlimit_decision_duration_seconds_count{policy="login"} 4
`), "redlimit_decision_duration_seconds"))

	// Slots in use: taken and given back, from two requests.
	o.Held("exports", 2)
	o.Held("exports", 1)
	o.Held("exports", -2)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP redlimit_slots_held Slots of a concurrency limit that this process's requests hold.
# TYPE redlimit_slots_held gauge
redlimit_slots_held{policy="api"} 0
redlimit_slots_held{policy="exports"} 1
redlimit_slots_held{policy="login"} 0
`), "redlimit_slots_held"))
}

// A second Observer on the same registry shares its metrics.
func TestTwoObserversShareMetrics(t *testing.T) {
	reg := prom.NewRegistry()
	a, err := prometheus.New(reg)
	require.NoError(t, err)
	b, err := prometheus.New(reg)
	require.NoError(t, err)
	a.Decision(context.Background(), observe.Decision{Policy: "p", Outcome: observe.Allowed})
	b.Decision(context.Background(), observe.Decision{Policy: "p", Outcome: observe.Allowed})
	assert.Equal(t, 2.0, counter(t, reg, "redlimit_decisions_total", "p", "allowed"))
}

// Once a policy's metrics exist, a decision allocates nothing.
func TestDecisionDoesNotAllocate(t *testing.T) {
	o, err := prometheus.New(prom.NewRegistry())
	require.NoError(t, err)
	d := observe.Decision{Policy: "p", Outcome: observe.Denied, Permits: 1, Latency: time.Millisecond}
	o.Decision(context.Background(), d)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { o.Decision(context.Background(), d) }))
}

// counter returns the value of the counter name with policy and outcome.
func counter(t *testing.T, reg *prom.Registry, name, policy, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["policy"] == policy && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{policy=%q,outcome=%q}", name, policy, outcome)
	return 0
}

func BenchmarkDecision(b *testing.B) {
	o, err := prometheus.New(prom.NewRegistry())
	require.NoError(b, err)
	d := observe.Decision{Policy: "p", Outcome: observe.Denied, Permits: 1, Latency: time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		o.Decision(context.Background(), d)
	}
}
