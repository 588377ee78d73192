// Command grpc is an example gRPC server limited with grpcrl: each client
// IP may make 10 calls per 10 s, unary or streaming. The service is
// written by hand, without protoc: demo.Greeter/Hello answers a
// google.protobuf.StringValue, and demo.Greeter/Count streams five.
//
// Run it with no arguments to serve; run it with -call N to call the server
// N times and print what each call got.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/demo"
	"github.com/redlimit/redlimit/grpcrl"
	"github.com/redlimit/redlimit/policy"
)

func main() {
	calls := flag.Int("call", 0, "call the server this many times instead of serving")
	flag.Parse()
	if *calls > 0 {
		call(*calls)
		return
	}

	client, stop := demo.Client()
	defer stop()
	perIP := policy.MustNew(client, "global", core.Rate{Permits: 10, Interval: 10 * time.Second})
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcrl.UnaryServerInterceptor(perIP)),
		grpc.ChainStreamInterceptor(grpcrl.StreamServerInterceptor(perIP)),
	)
	srv.RegisterService(&greeter, nil)
	lis, err := net.Listen("tcp", demo.Addr())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf(`gRPC example listening on %s
  demo.Greeter/Hello  unary: 10 calls per 10 s per client IP
  demo.Greeter/Count  server streaming: limited at its start, by the same budget
Try: go run -C examples/grpc . -call 12
`, lis.Addr())
	log.Fatal(srv.Serve(lis))
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

// call calls Hello n times, then Count once, and prints what each got: the
// rate limit fields, or the refusal and how long to wait.
func call(n int) {
	conn, err := grpc.NewClient(demo.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
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
