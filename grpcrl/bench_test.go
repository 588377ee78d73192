package grpcrl_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpcrl"
	"github.com/redlimit/redlimit/internal/testkit/memredis"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/policy"
)

// BenchmarkInterceptor measures one unary call, client to server in
// process over bufconn, with and without the server interceptor, on a core
// that answers from memory (internal/memredis), and the core decision
// alone: the interceptor's own cost is "limited" less "bare" less "core".
// "fields" is the call with an interceptor that only sends the five rate
// limit fields that "limited" sends: what grpc charges for them.
// The key is an API key from the call's metadata (a bufconn peer has no IP
// address).
func BenchmarkInterceptor(b *testing.B) {
	rate := core.PerMinute(1_000_000)
	call := func(b *testing.B, opts ...grpc.ServerOption) {
		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer(opts...)
		srv.RegisterService(&serviceDesc, &testService{})
		go func() { _ = srv.Serve(lis) }()
		defer srv.Stop()
		conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "bench")
		in, out := &emptypb.Empty{}, new(wrapperspb.StringValue)
		b.ReportAllocs()
		for b.Loop() {
			if err := conn.Invoke(ctx, unaryMethod, in, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { call(b) })
	b.Run("limited", func(b *testing.B) {
		client, err := core.New(memredis.New())
		if err != nil {
			b.Fatal(err)
		}
		p := policy.MustNew(client, "bench", rate, policy.WithKey(keyfunc.Header("x-api-key")), policy.WithTimeout(10*time.Second))
		call(b, grpc.UnaryInterceptor(grpcrl.UnaryServerInterceptor(p)))
	})
	b.Run("fields", func(b *testing.B) {
		// The values share one backing array, as the interceptor's do: a
		// call allocates only its metadata map.
		keys := []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}
		values := []string{`"bench";q=1000000;w=60`, `"bench";r=999999;t=1`, "1000000", "999999", "1"}
		fields := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			md := make(metadata.MD, len(keys))
			for i, k := range keys {
				md[k] = values[i : i+1 : i+1]
			}
			_ = grpc.SetHeader(ctx, md)
			return next(ctx, req)
		}
		call(b, grpc.UnaryInterceptor(fields))
	})
	b.Run("core", func(b *testing.B) { memredis.Decide(b, "bench:bench", rate) })
}
