// Command grpc is an example gRPC server limited with grpcrl: each client
// IP may make 10 calls per 10 s, unary or streaming; health checks are not
// limited. The service is written by hand, without protoc:
// demo.Greeter/Hello answers a google.protobuf.StringValue, and
// demo.Greeter/Count streams five.
//
// Run it with no arguments to serve; run it with -call N to call the server
// N times and print what each call got.
//
// It takes its Redis from REDIS_URL (an embedded one when unset), its
// address from ADDR (127.0.0.1:8080), and the number of processes that
// share its limit from INSTANCES (1).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/embedded"
	"github.com/redlimit/redlimit/grpcrl"
	"github.com/redlimit/redlimit/internal/redisurl"
	"github.com/redlimit/redlimit/policy"
)

func main() {
	addr := cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080")
	calls := flag.Int("call", 0, "call the server this many times instead of serving")
	flag.Parse()
	if *calls > 0 {
		call(addr, *calls)
		return
	}

	// Redis is at REDIS_URL, such as redis://user:password@host:6379/0.
	// Without it, the demo starts an embedded Redis in this process; a
	// service would require REDIS_URL instead.
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		addr, stop, err := embedded.Start()
		if err != nil {
			log.Fatalf("embedded Redis: %v", err)
		}
		defer stop()
		redisURL = "redis://" + addr
		log.Print(embedded.Notice)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		// The error may quote the URL, password and all: say what is wrong
		// without it.
		log.Fatalf("REDIS_URL: %v", redisurl.Redact(err, redisURL))
	}
	// Each round trip stops at its decision's deadline (100 ms by default),
	// not at go-redis's 3 s ReadTimeout.
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	log.Printf("using Redis at %s", opts.Addr) // the address alone: the URL may hold a password

	client, err := core.New(rdb, core.WithKeyPrefix("example:"))
	if err != nil {
		log.Fatal(err)
	}
	// Check tells at start what keeps Redis from deciding, if anything. The
	// service starts all the same: its limits decide in memory, at this
	// instance's share, until Redis answers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Check(ctx); err != nil {
		log.Printf("redis check: %v: limiting in memory at this instance's share until Redis answers", err)
	} else {
		log.Printf("redis check: ok")
	}

	// INSTANCES is how many processes share the limits: while Redis cannot
	// decide, each one limits in memory at its share of the rate.
	instances := 1
	if n, err := strconv.Atoi(os.Getenv("INSTANCES")); err == nil && n > 0 {
		instances = n
	}

	// A connection without a call for a minute is closed.
	srv := newServer(client, instances, time.Minute)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf(`gRPC example listening on %s
  demo.Greeter/Hello      unary: 10 calls per 10 s per client IP
  demo.Greeter/Count      server streaming: limited at its start, by the same budget
  grpc.health.v1.Health   Check and Watch not limited
Try: go run -C examples/grpc . -call 12
`, lis.Addr())
	log.Fatal(srv.Serve(lis))
}

// newServer returns the server: the greeter limited per client IP by a
// policy on client that instances processes share, the health service
// unlimited, and the keepalive settings of a server open to clients, which
// close a connection without a call for maxIdle.
func newServer(client *core.Client, instances int, maxIdle time.Duration) *grpc.Server {
	// Every call, unary or streaming: 10 per 10 s per client IP.
	perIP := policy.MustNew(client, "global", core.Rate{Permits: 10, Interval: 10 * time.Second},
		policy.WithFailLocal(instances))
	// Health checks are not limited: a load balancer's probes must not be
	// refused, however busy the address they come from.
	health := grpcrl.WithSkip(func(_ context.Context, fullMethod string) bool {
		return fullMethod == healthpb.Health_Check_FullMethodName || fullMethod == healthpb.Health_Watch_FullMethodName
	})
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcrl.UnaryServerInterceptor(perIP, health)),
		grpc.ChainStreamInterceptor(grpcrl.StreamServerInterceptor(perIP, health)),
		// Without these, an idle client holds its connection, and its
		// memory, for as long as it likes. The server closes a connection
		// without a call for maxIdle, and one whose client no longer
		// answers pings (sent after 2 minutes without activity, answered
		// within 20 s).
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: maxIdle,
			Time:              2 * time.Minute,
			Timeout:           20 * time.Second,
		}),
		// A client may ping every 15 s at most, and only while it has calls
		// open; one that pings more often, or with no call open, is
		// disconnected.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second}),
	)
	// Registered with an implementation, as protoc's RegisterXServer does:
	// grpcrl tells the server's own streams from those of an
	// unknown-service handler by it.
	srv.RegisterService(&greeter, struct{}{})
	healthpb.RegisterHealthServer(srv, grpchealth.NewServer()) // SERVING
	return srv
}

// greeter is the service, described by hand as protoc would.
var greeter = grpc.ServiceDesc{
	ServiceName: "demo.Greeter",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Hello", Handler: func(_ any, ctx context.Context, dec func(any) error,
		interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		hello := func(ctx context.Context, _ any) (any, error) {
			p, _ := peer.FromContext(ctx)
			return wrapperspb.String(fmt.Sprintf("hello, %s from %v", in.GetValue(), p.Addr)), nil
		}
		if interceptor == nil {
			return hello(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/demo.Greeter/Hello"}, hello)
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Count", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
		for i := range 5 {
			if err := ss.SendMsg(wrapperspb.String(strconv.Itoa(i + 1))); err != nil {
				return err
			}
		}
		return nil
	}}},
}

// call calls the server at addr: Hello n times, then Count and the health
// check once each, and prints what each got: the rate limit fields, or the
// refusal and how long to wait.
func call(addr string, n int) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		var header metadata.MD
		out := new(wrapperspb.StringValue)
		err := conn.Invoke(ctx, "/demo.Greeter/Hello", wrapperspb.String("gopher"), out, grpc.Header(&header))
		fmt.Printf("%2d  %s\n", i+1, outcome(out.GetValue(), header, err))
	}
	cs, err := conn.NewStream(ctx, &greeter.Streams[0], "/demo.Greeter/Count")
	if err == nil {
		err = cs.CloseSend()
	}
	var got []string
	for err == nil {
		m := new(wrapperspb.StringValue)
		if err = cs.RecvMsg(m); err == nil {
			got = append(got, m.GetValue())
		}
	}
	if err == io.EOF {
		err = nil
	}
	header, _ := cs.Header()
	fmt.Printf("Count  %s\n", outcome(fmt.Sprint(got), header, err))

	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		fmt.Printf("Health  %s, not limited\n", res.GetStatus())
	} else {
		fmt.Printf("Health  %s\n", outcome("", nil, err))
	}
}

// outcome describes a call's result.
func outcome(reply string, header metadata.MD, err error) string {
	if err == nil {
		return fmt.Sprintf("OK %q  ratelimit: %s", reply, header.Get("ratelimit"))
	}
	s := status.Convert(err)
	for _, d := range s.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			return fmt.Sprintf("%s %q  retry in %v", s.Code(), s.Message(), r.GetRetryDelay().AsDuration())
		}
	}
	return fmt.Sprintf("%s %q", s.Code(), s.Message())
}
