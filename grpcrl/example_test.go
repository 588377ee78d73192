package grpcrl_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpcrl"
	"github.com/redlimit/redlimit/policy"
)

// Every call of a client takes a permit from its peer IP's budget of 100 a
// minute; the 101st fails with ResourceExhausted, whose RetryInfo says when
// a permit comes back (a minute after the first call, rounded up to the
// second; printed here to the minute). The service here is gRPC's health
// service; the Redis, an embedded one (miniredis), so that the example
// needs no server.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}))
	if err != nil {
		panic(err)
	}

	calls := policy.MustNew(client, "calls", core.PerMinute(100)) // per peer IP
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcrl.UnaryServerInterceptor(calls)),
		grpc.ChainStreamInterceptor(grpcrl.StreamServerInterceptor(calls)),
	)

	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	var runs []string
	last, count := "", 0
	for i := 0; i <= 101; i++ {
		code := ""
		if i < 101 {
			_, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
			code = status.Code(err).String()
			for _, d := range status.Convert(err).Details() {
				if r, ok := d.(*errdetails.RetryInfo); ok {
					code += " (retry in " + r.RetryDelay.AsDuration().Round(time.Minute).String() + ")"
				}
			}
		}
		if code != last && count > 0 {
			runs = append(runs, fmt.Sprintf("%d x %s", count, last))
			count = 0
		}
		last = code
		count++
	}
	fmt.Println(strings.Join(runs, ", "))
	// Output:
	// 100 x OK, 1 x ResourceExhausted (retry in 1m0s)
}

// Calls to a rate-limited upstream wait for a permit of a budget that every
// process of the fleet shares: 50 calls a second here, in all.
func ExampleUnaryClientInterceptor() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}))
	if err != nil {
		panic(err)
	}
	addr := "search.internal:443"

	upstream := client.Limiter("upstream:search", core.WithRate(core.PerSecond(50)))
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcrl.UnaryClientInterceptor(upstream)))

	if err != nil {
		panic(err)
	}
	defer conn.Close()
	// Calls on conn each wait for a permit first (l.Acquire), up to their
	// deadline.
}
