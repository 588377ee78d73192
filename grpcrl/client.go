package grpcrl

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/native"
)

// UnaryClientInterceptor returns an interceptor that makes each call wait for
// a permit of l (l.Acquire). A call without one by its deadline is not sent:
// it fails with its context's code, or Unavailable when Redis fails.
func UnaryClientInterceptor(l *core.Limiter, opts ...Option) grpc.UnaryClientInterceptor {
	if l == nil {
		panic("grpcrl.UnaryClientInterceptor: nil *core.Limiter")
	}
	c := native.Apply[config](opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker,
		o ...grpc.CallOption) error {
		err := l.Acquire(ctx, 1)
		if err == nil {
			return invoke(ctx, method, req, reply, cc, o...)
		} else if c.onErr != nil {
			c.onErr(ctx, err)
		}
		code := status.FromContextError(err).Code()
		if code == codes.Unknown || errors.Is(err, core.ErrUnavailable) {
			code = codes.Unavailable
		}
		return status.Error(code, "grpcrl: no permit for the call from its rate limiter")
	}
}
