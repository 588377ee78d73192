// Package grpcrl applies redlimit policies (package policy) to gRPC server
// calls, and paces client calls with a core.Limiter. A call's key is by
// default its peer's IP; key functions see incoming metadata as headers and
// the full method as the route (keyfunc.Route), but for the calls of a
// server's unknown-service handler, whose method the client chooses: they
// are one route, "unknown method" (register services with their
// implementation, not nil, for their streams to be told from them). A stream is
// decided once, at its start. The rate limit fields go out as lower-case
// header metadata. Over the limit, a call fails with ResourceExhausted, a
// RetryInfo and a QuotaFailure naming the policy; a cost above the rate, the
// same without RetryInfo; no key, PermissionDenied; a bad cost,
// InvalidArgument; fail closed, Unavailable. policy.WithRefund sees a served
// call's code as its HTTP status (NotFound 404, Unavailable 503, ...). A
// handler reads its call's decision with policy.ResultFrom(ctx).
package grpcrl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/native"
	"github.com/redlimit/redlimit/policy"
)

// An Option configures an interceptor.
type Option func(*config)

type config struct {
	p     *policy.Policy
	onErr func(ctx context.Context, err error)
	skip  func(ctx context.Context, fullMethod string) bool
}

// WithSkip exempts the calls for which skip returns true, given the call's
// context and its full method ("/grpc.health.v1.Health/Check"): they go
// straight to the handler, unlimited, such as a load balancer's health
// checks.
func WithSkip(skip func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithErrorHandler receives the errors of the policy (Decision.Err), instead
// of the log, or of the client interceptor's limiter.
func WithErrorHandler(f func(context.Context, error)) Option { return func(c *config) { c.onErr = f } }

func newServer(fn string, p *policy.Policy, opts []Option) *config {
	c := native.Configure[config]("grpcrl."+fn, p, opts)
	if c.p = p; c.onErr == nil {
		c.onErr = p.LogError
	}
	return &c
}

// UnaryServerInterceptor returns an interceptor that applies p to calls.
func UnaryServerInterceptor(p *policy.Policy, opts ...Option) grpc.UnaryServerInterceptor {
	c := newServer("UnaryServerInterceptor", p, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
		if c.skip != nil && c.skip(ctx, info.FullMethod) {
			return next(ctx, req)
		}
		err = c.serve(ctx, info.FullMethod, grpc.SetHeader, func(ctx context.Context) error { resp, err = next(ctx, req); return err })
		return resp, err
	}
}

// StreamServerInterceptor returns an interceptor that applies p to streams.
func StreamServerInterceptor(p *policy.Policy, opts ...Option) grpc.StreamServerInterceptor {
	c := newServer("StreamServerInterceptor", p, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
		if c.skip != nil && c.skip(ss.Context(), info.FullMethod) {
			return next(srv, ss)
		}
		route := info.FullMethod
		if srv == nil {
			// The server's unknown-service handler: the method is the
			// client's choice, so all such calls are one route.
			route = unknownMethod
		}
		return c.serve(ss.Context(), route, func(_ context.Context, md metadata.MD) error { return ss.SetHeader(md) },
			func(ctx context.Context) error { return next(srv, &stream{ss, ctx}) })
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// unknownMethod is the route of the calls that a server's unknown-service
// handler serves.
const unknownMethod = "unknown method"

// serve decides a call to route with c.p, sends its fields, and serves or
// refuses it.
func (c *config) serve(ctx context.Context, route string, set func(context.Context, metadata.MD) error, next func(context.Context) error) error {
	x := &call{ctx: ctx, route: route, md: metadata.MD{}}
	d := c.p.Decide(x)
	_ = set(x.ctx, x.md)
	if d.Err != nil {
		c.onErr(x.ctx, d.Err)
	}
	if d.Status != 0 {
		return refusal(&d)
	}
	code := codes.Internal // unless the handler returns: it panicked
	defer func() { d.Done(cmp.Or(httpStatuses[code], http.StatusInternalServerError)) }()
	err := next(x.ctx)
	code = status.Code(err)
	return err
}

func refusal(d *policy.Decision) error {
	var problem struct{ Detail string }
	_ = json.Unmarshal(d.Body, &problem) // the policy's own problem+json
	s := status.New(cmp.Or(refusalCodes[d.Status], codes.Unknown), problem.Detail)
	if s.Code() == codes.ResourceExhausted {
		details := []protoadapt.MessageV1{&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
			{Subject: d.Policy, Description: problem.Detail}}}}
		if d.Status == http.StatusTooManyRequests && d.Result.RetryAfter > 0 { // rounded up to the second as Retry-After
			wait := max((d.Result.RetryAfter+time.Second-1)/time.Second, 1) * time.Second
			details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
		}
		if withDetails, err := s.WithDetails(details...); err == nil {
			s = withDetails
		}
	}
	return s.Err()
}

var (
	refusalCodes = map[int]codes.Code{429: codes.ResourceExhausted, 413: codes.ResourceExhausted,
		403: codes.PermissionDenied, 400: codes.InvalidArgument, 503: codes.Unavailable}
	httpStatuses = map[codes.Code]int{codes.OK: 200, codes.InvalidArgument: 400, codes.Unauthenticated: 401,
		codes.PermissionDenied: 403, codes.NotFound: 404, codes.ResourceExhausted: 429,
		codes.Unimplemented: 501, codes.Unavailable: 503, codes.DeadlineExceeded: 504}
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

type call struct { // a call, as a policy.Exchange
	ctx           context.Context
	route         string         // its full method, or unknownMethod
	md            metadata.MD    // the rate limit fields
	headers       native.Headers // their values
	native.Shared                // what the call's policies share
}

func (x *call) Context() context.Context       { return x.ctx }
func (x *call) SetContext(ctx context.Context) { x.ctx = ctx }
func (x *call) SetHeader(name, value string)   { x.headers.Set(http.Header(x.md), lower(name), value) }

// lowered holds the metadata keys of the header names the policies set: a
// few, whatever the calls.
var lowered sync.Map

// lower returns name in lower case, as metadata keys are.
func lower(name string) string {
	if l, ok := lowered.Load(name); ok {
		return l.(string)
	}
	l := strings.ToLower(name)
	lowered.Store(name, l)
	return l
}
func (x *call) Route() (string, error)         { return x.route, nil }
func (x *call) Header(k string) string         { return cmp.Or(x.HeaderValues(k)...) }
func (x *call) HeaderValues(k string) []string { return metadata.ValueFromIncomingContext(x.ctx, k) }
func (x *call) Query(string) string            { return "" }
func (x *call) Value(key any) any              { return x.ctx.Value(key) }

// RemoteAddrPort returns the peer's TCP address, which keyfunc.IP reads
// with no string made and parsed again.
func (x *call) RemoteAddrPort() netip.AddrPort {
	if p, ok := peer.FromContext(x.ctx); ok {
		return native.AddrPort(p.Addr)
	}
	return netip.AddrPort{}
}

func (x *call) RemoteAddr() string {
	if p, ok := peer.FromContext(x.ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
