package main

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/examples/internal/exampletest"
)

// serve serves srv on a free local port until the test ends, and returns a
// client connection to it.
func serve(t *testing.T, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func hello(ctx context.Context, conn *grpc.ClientConn) error {
	return conn.Invoke(ctx, "/demo.Greeter/Hello", wrapperspb.String("test"), new(wrapperspb.StringValue))
}

// Health checks, Check and Watch, are served however many calls the
// client's address made: the greeter's 10 per 10 s run out, the health
// service's do not.
func TestHealthChecksAreNotLimited(t *testing.T) {
	conn := serve(t, newServer(exampletest.Client(t), 1, time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 10 {
		require.NoError(t, hello(ctx, conn), "Hello #%d", i+1)
	}
	assert.Equal(t, codes.ResourceExhausted, status.Code(hello(ctx, conn)), "Hello #11")

	health := healthpb.NewHealthClient(conn)
	for i := range 20 {
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "Check #%d", i+1)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus())
	}
	for i := range 3 {
		watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		res, err := watch.Recv()
		require.NoError(t, err, "Watch #%d", i+1)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus())
	}

	// The streaming method is limited by the same budget, spent.
	stream, err := conn.NewStream(ctx, &greeter.Streams[0], "/demo.Greeter/Count")
	require.NoError(t, err)
	require.NoError(t, stream.CloseSend())
	err = stream.RecvMsg(new(wrapperspb.StringValue))
	assert.NotErrorIs(t, err, io.EOF)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "Count")
}

// The server closes a connection without a call for its maxIdle (short
// here): the client's connection leaves READY soon after its last call.
func TestIdleConnectionsClose(t *testing.T) {
	idle := 200 * time.Millisecond
	conn := serve(t, newServer(exampletest.Client(t), 1, idle))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, hello(ctx, conn))
	require.Equal(t, connectivity.Ready, conn.GetState())
	called := time.Now()

	wait, cancel := context.WithTimeout(ctx, idle+2*time.Second)
	defer cancel()
	assert.True(t, conn.WaitForStateChange(wait, connectivity.Ready), "still READY %v after the call", time.Since(called))
	assert.NotEqual(t, connectivity.Ready, conn.GetState())
	assert.GreaterOrEqual(t, time.Since(called), idle/2, "closed before it was idle for maxIdle")
}
