package grpcrl_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpcrl"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/policy"
)

// recoverer answers a handler's panic with Internal, as a recovery
// interceptor does.
func recoverer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = status.Errorf(codes.Internal, "panic: %v", v)
		}
	}()
	return next(ctx, req)
}

// A unary call holds its slot until its handler returns or panics; two
// servers on one Redis (two processes) share the limit; a refusal is
// ResourceExhausted without RetryInfo.
func TestConcurrencyUnary(t *testing.T) {
	redistest.Need(t)
	rdb := redistest.Shared(t).Client(t)
	pre := prefix(t)
	var conns []*grpc.ClientConn
	var svcs []*testService
	for range 2 {
		c, err := core.New(rdb, core.WithKeyPrefix(pre))
		require.NoError(t, err)
		p := policy.MustNewConcurrency(c, "calls", 2)
		conn, svc := serve(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(recoverer, grpcrl.UnaryServerInterceptor(p))})
		conns, svcs = append(conns, conn), append(svcs, svc)
	}
	done := make(chan error, 2)
	for i := range 2 {
		go func() { _, err := invoke(t, conns[i], unaryMethod, codeKey, "hold"); done <- err }()
	}
	require.Eventually(t, func() bool {
		a, _ := svcs[0].held()
		b, _ := svcs[1].held()
		return a+b == 2
	}, 10*time.Second, 5*time.Millisecond)
	header, err := invoke(t, conns[0], unaryMethod)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	retry, quota := details(t, err)
	assert.Nil(t, retry, "when a slot frees is not known")
	require.NotNil(t, quota)
	assert.Equal(t, "calls", quota.GetViolations()[0].GetSubject())
	assert.Equal(t, []string{`"calls";q=2;qu="concurrent-requests"`}, header.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"calls";r=0`}, header.Get("ratelimit"))
	for _, s := range svcs {
		s.free()
	}
	for range 2 {
		require.NoError(t, <-done)
	}
	_, err = invoke(t, conns[1], unaryMethod, codeKey, "panic")
	assert.Equal(t, codes.Internal, status.Code(err))
	for range 3 {
		_, err = invoke(t, conns[0], unaryMethod)
		require.NoError(t, err, "every slot came back, the panicking call's too")
	}
}

// A stream holds its slot from its start to its end.
func TestConcurrencyStream(t *testing.T) {
	client, _ := shared(t)
	p := policy.MustNewConcurrency(client, "streams", 1)
	conn, svc := serve(t, []grpc.ServerOption{grpc.StreamInterceptor(grpcrl.StreamServerInterceptor(p))})
	open := func(ctx context.Context, kv ...string) (grpc.ClientStream, error) {
		cs, err := conn.NewStream(metadata.AppendToOutgoingContext(ctx, kv...), &serviceDesc.Streams[0], streamMethod)
		require.NoError(t, err)
		require.NoError(t, cs.SendMsg(&emptypb.Empty{}))
		require.NoError(t, cs.CloseSend())
		return cs, cs.RecvMsg(new(wrapperspb.StringValue))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := open(ctx, codeKey, "hold")
	require.NoError(t, err, "the first message")
	_, err = open(ctx)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the first stream holds the slot")
	svc.free()
	for {
		if err := first.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			require.True(t, errors.Is(err, io.EOF), "%v", err)
			break
		}
	}
	require.Eventually(t, func() bool { _, err := open(ctx); return err == nil }, 5*time.Second, 10*time.Millisecond,
		"the stream's end gave its slot back")
}

// In wait mode, calls over the limit wait their turn: all are served,
// never more at once than the limit.
func TestConcurrencyWait(t *testing.T) {
	client, _ := shared(t)
	p := policy.MustNewConcurrency(client, "waits", 1, policy.WithWait(20*time.Second))
	conn, svc := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(grpcrl.UnaryServerInterceptor(p))})
	done := make(chan error, 4)
	for range 4 {
		go func() { _, err := invoke(t, conn, unaryMethod, codeKey, "hold"); done <- err }()
	}
	for range 4 {
		require.Eventually(t, func() bool { now, _ := svc.held(); return now == 1 }, 10*time.Second, 5*time.Millisecond)
		svc.free()
		require.NoError(t, <-done)
	}
	_, most := svc.held()
	assert.Equal(t, 1, most)
}
