package otel_test

import (
	"net/http"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	otelglobal "go.opentelemetry.io/otel"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/metrics/otel"
	"github.com/redlimit/redlimit/nethttprl"
	"github.com/redlimit/redlimit/policy"
)

// A decision shows on the request's trace: the observer adds it to the
// request's span (started by the server's own instrumentation), and each
// round trip to Redis is a span linked to every request it carried, with
// go-redis's command spans below it. The example needs a Redis, so it is
// not run.
func ExampleRoundTrips() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	if err := redisotel.InstrumentTracing(rdb); err != nil { // go-redis's command spans
		panic(err)
	}
	client, err := core.New(rdb, otel.RoundTrips(otelglobal.Tracer("redlimit")))
	if err != nil {
		panic(err)
	}
	obs, err := otel.New(otelglobal.Meter("redlimit"))
	if err != nil {
		panic(err)
	}
	api := policy.MustNew(client, "api", core.PerMinute(100), policy.WithObserver(obs))
	handler := nethttprl.New(api)(http.NotFoundHandler())

	_ = handler // served inside the server's tracing middleware (otelhttp.NewHandler, say)
}
