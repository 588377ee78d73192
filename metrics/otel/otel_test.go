package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlimit/redlimit/metrics/otel"
	"github.com/redlimit/redlimit/observe"
)

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o, err := otel.New(provider.Meter("redlimit"))
	require.NoError(t, err)
	for range 3 {
		o.Decision(context.Background(), observe.Decision{Policy: "login", Outcome: observe.Allowed, Latency: 200 * time.Microsecond})
	}
	o.Decision(context.Background(), observe.Decision{Policy: "login", Outcome: observe.Denied, Latency: 300 * time.Microsecond})
	o.Decision(context.Background(), observe.Decision{Policy: "api", Outcome: observe.ErrorServed, Latency: 100 * time.Millisecond, Err: errors.New("redis down"), RedisFailed: true})
	o.Fallback("api", true)
	o.Held("exports", 2)
	o.Held("exports", 1)
	o.Held("exports", -2)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	require.Len(t, got, 5)
	held := got["redlimit_slots_held"].Data.(metricdata.Sum[int64])
	assert.False(t, held.IsMonotonic)
	assert.Equal(t, int64(1), sum(held, "exports", ""), "slots in use")

	decisions := got["redlimit_decisions_total"].Data.(metricdata.Sum[int64])
	assert.Equal(t, int64(3), sum(decisions, "login", "allowed"))
	assert.Equal(t, int64(1), sum(decisions, "login", "denied"))
	assert.Equal(t, int64(1), sum(decisions, "api", "error_served"))

	errs := got["redlimit_redis_errors_total"].Data.(metricdata.Sum[int64])
	assert.Equal(t, int64(1), sum(errs, "api", ""))

	hist := got["redlimit_decision_duration_seconds"].Data.(metricdata.Histogram[float64])
	assert.Equal(t, "s", got["redlimit_decision_duration_seconds"].Unit)
	for _, dp := range hist.DataPoints {
		assert.Equal(t, observe.LatencyBuckets, dp.Bounds)
		if policy, _ := dp.Attributes.Value("policy"); policy.AsString() == "login" {
			assert.Equal(t, uint64(4), dp.Count)
		}
	}

	gauge := got["redlimit_fallback_active"].Data.(metricdata.Gauge[int64])
	require.Len(t, gauge.DataPoints, 1)
	assert.Equal(t, int64(1), gauge.DataPoints[0].Value)
	o.Fallback("api", false)
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "redlimit_fallback_active" {
				assert.Equal(t, int64(0), m.Data.(metricdata.Gauge[int64]).DataPoints[0].Value)
			}
		}
	}
}

// sum returns the value of the data point with policy (and outcome, when
// not empty).
func sum(s metricdata.Sum[int64], policy, outcome string) int64 {
	for _, dp := range s.DataPoints {
		p, _ := dp.Attributes.Value(attribute.Key("policy"))
		o, ok := dp.Attributes.Value(attribute.Key("outcome"))
		if p.AsString() == policy && (outcome == "" || ok && o.AsString() == outcome) {
			return dp.Value
		}
	}
	return -1
}

func BenchmarkDecision(b *testing.B) {
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	o, err := otel.New(provider.Meter("redlimit"))
	require.NoError(b, err)
	d := observe.Decision{Policy: "p", Outcome: observe.Denied, Permits: 1, Latency: time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		o.Decision(context.Background(), d)
	}
}

// Once a policy's options exist, a decision allocates nothing.
func TestDecisionDoesNotAllocate(t *testing.T) {
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	o, err := otel.New(provider.Meter("redlimit"))
	require.NoError(t, err)
	d := observe.Decision{Policy: "p", Outcome: observe.Denied, Permits: 1, Latency: time.Millisecond, Err: errors.New("x"), RedisFailed: true}
	o.Decision(context.Background(), d)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { o.Decision(context.Background(), d) }))
}
