package grpcrl_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpcrl"
	"github.com/redlimit/redlimit/internal/testkit/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/observe"
	"github.com/redlimit/redlimit/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The methods of the test service.
const (
	unaryMethod  = "/test.Test/Unary"
	otherMethod  = "/test.Test/Other"
	streamMethod = "/test.Test/Stream"
)

// codeKey is the metadata key with which a test asks the service for an
// error: a gRPC code, or "context" for a bare context error.
const codeKey = "x-code"

// testService is a gRPC service written without protoc: two unary methods
// that take an emptypb.Empty and answer a wrapperspb.StringValue, or the
// error that the call's x-code metadata asks for, and a server-streaming
// method that sends three StringValues. served counts the calls that reached
// a handler.
type testService struct {
	served atomic.Int64
	inFlight
}

// inFlight counts the calls held in their handlers (x-code "hold"), and
// releases them.
type inFlight struct {
	mu        sync.Mutex
	now, most int
	release   chan struct{}
}

// hold holds a call until the next release, or until ctx ends.
func (h *inFlight) hold(ctx context.Context) {
	h.mu.Lock()
	if h.release == nil {
		h.release = make(chan struct{})
	}
	h.now++
	h.most = max(h.most, h.now)
	rel := h.release
	h.mu.Unlock()
	select {
	case <-rel:
	case <-ctx.Done():
	}
	h.mu.Lock()
	h.now--
	h.mu.Unlock()
}

// free releases the calls held now.
func (h *inFlight) free() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release != nil {
		close(h.release)
		h.release = nil
	}
}

// held returns the calls held now, and the most at once.
func (h *inFlight) held() (now, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now, h.most
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "test.Test",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Unary", Handler: unaryHandler}, {MethodName: "Other", Handler: unaryHandler}},
	Streams:     []grpc.StreamDesc{{StreamName: "Stream", Handler: streamHandler, ServerStreams: true}},
}

func unaryHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(emptypb.Empty)
	if err := dec(in); err != nil {
		return nil, err
	}
	method, _ := grpc.Method(ctx)
	handle := func(ctx context.Context, _ any) (any, error) {
		srv.(*testService).served.Add(1)
		switch c := metadata.ValueFromIncomingContext(ctx, codeKey); {
		case len(c) == 0:
			return wrapperspb.String("ok"), nil
		case c[0] == "result": // the call's decision, as its handler reads it
			if r, ok := policy.ResultFrom(ctx); ok {
				return wrapperspb.String("r=" + strconv.FormatInt(r.Remaining, 10)), nil
			}
			return wrapperspb.String("none"), nil
		case c[0] == "context":
			return nil, context.DeadlineExceeded
		case c[0] == "hold":
			srv.(*testService).hold(ctx)
			return wrapperspb.String("ok"), nil
		case c[0] == "panic":
			panic("the handler panics, as x-code asks")
		default:
			n, err := strconv.Atoi(c[0])
			if err != nil {
				return nil, err
			}
			return nil, status.Error(codes.Code(n), "asked for")
		}
	}
	if interceptor == nil {
		return handle(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, handle)
}

func streamHandler(srv any, ss grpc.ServerStream) error {
	srv.(*testService).served.Add(1)
	if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
		return err
	}
	for i := range 3 {
		if i == 1 && len(metadata.ValueFromIncomingContext(ss.Context(), codeKey)) > 0 {
			srv.(*testService).hold(ss.Context()) // "hold": between the first message and the others
		}
		if err := ss.SendMsg(wrapperspb.String(strconv.Itoa(i))); err != nil {
			return err
		}
	}
	return nil
}

// serve starts a gRPC server of the test service on a loopback TCP port,
// and returns a client connection to it, made with dial.
func serve(t *testing.T, opts []grpc.ServerOption, dial ...grpc.DialOption) (*grpc.ClientConn, *testService) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := &testService{}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&serviceDesc, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(),
		append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn, svc
}

// unary serves the test service with p applied by the unary interceptor.
func unary(t *testing.T, p *policy.Policy, opts ...grpcrl.Option) *grpc.ClientConn {
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(grpcrl.UnaryServerInterceptor(p, opts...))})
	return conn
}

// newClient returns a core.Client on rdb whose keys no other test shares.
func newClient(t *testing.T, rdb redis.UniversalClient) *core.Client {
	t.Helper()
	c, err := core.New(rdb, core.WithKeyPrefix(prefix(t)))
	require.NoError(t, err)
	return c
}

func prefix(t *testing.T) string {
	return t.Name() + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
}

// shared returns a core.Client on the test binary's Redis, and the Redis.
func shared(t *testing.T) (*core.Client, *redis.Client) {
	rdb := redistest.Shared(t).Client(t)
	return newClient(t, rdb), rdb
}

// invoke calls method with the metadata kv and returns the response header
// and the call's error.
func invoke(t *testing.T, conn *grpc.ClientConn, method string, kv ...string) (metadata.MD, error) {
	return invokeWithin(t, conn, 10*time.Second, method, kv...)
}

func invokeWithin(t *testing.T, conn *grpc.ClientConn, timeout time.Duration, method string, kv ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), kv...), timeout)
	defer cancel()
	var header metadata.MD
	err := conn.Invoke(ctx, method, &emptypb.Empty{}, new(wrapperspb.StringValue), grpc.Header(&header))
	return header, err
}

// recorder is an observer that keeps the decisions.
type recorder struct {
	mu        sync.Mutex
	decisions []observe.Decision
}

func (r *recorder) Decision(_ context.Context, d observe.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decisions = append(r.decisions, d)
}

func (r *recorder) Fallback(string, bool) {}

func (*recorder) Held(string, int64) {}

// last returns the latest decision.
func (r *recorder) last(t *testing.T) observe.Decision {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.decisions, "no decision observed")
	return r.decisions[len(r.decisions)-1]
}

// details returns the RetryInfo and QuotaFailure of a status error.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		default:
			t.Fatalf("unexpected detail %T: %v", d, d)
		}
	}
	return retry, quota
}

// ceilSecond is d rounded up to the second, at least one: Retry-After.
func ceilSecond(d time.Duration) time.Duration {
	return max((d+time.Second-1)/time.Second, 1) * time.Second
}

func TestAllow(t *testing.T) {
	client, _ := shared(t)
	p := policy.MustNew(client, "api", core.PerMinute(3))
	conn := unary(t, p)
	for i := range 3 {
		header, err := invoke(t, conn, unaryMethod)
		require.NoError(t, err, "call %d", i+1)
		assert.Equal(t, []string{`"api";q=3;w=60`}, header.Get("ratelimit-policy"))
		require.Len(t, header.Get("ratelimit"), 1)
		assert.Regexp(t, `^"api";r=`+strconv.Itoa(2-i)+`;t=\d+$`, header.Get("ratelimit")[0])
		assert.Equal(t, []string{"3"}, header.Get("x-ratelimit-limit"))
		assert.Equal(t, []string{strconv.Itoa(2 - i)}, header.Get("x-ratelimit-remaining"))
		assert.Len(t, header.Get("x-ratelimit-reset"), 1)
		assert.Empty(t, header.Get("retry-after"), "an allowed call has no retry-after")
	}
	// By default a call is keyed by its peer's address, as keyfunc.IP
	// formats it.
	r, err := p.Peek(context.Background(), "127.0.0.1")
	require.NoError(t, err)
	assert.Zero(t, r.Remaining, "the three calls were limited under the peer's address")
	assert.False(t, r.Allowed)
}

// TestHandlerReadsItsDecision: a handler reads the decision of its call
// with policy.ResultFrom.
func TestHandlerReadsItsDecision(t *testing.T) {
	client, _ := shared(t)
	conn := unary(t, policy.MustNew(client, "api", core.PerMinute(3)))
	ctx := metadata.AppendToOutgoingContext(context.Background(), codeKey, "result")
	for _, want := range []string{"r=2", "r=1"} {
		got := new(wrapperspb.StringValue)
		require.NoError(t, conn.Invoke(ctx, unaryMethod, &emptypb.Empty{}, got))
		assert.Equal(t, want, got.GetValue())
	}
}

// TestSkip: calls that WithSkip exempts reach their handler unlimited, unary
// and streaming, such as a load balancer's health checks; the others are
// limited.
func TestSkip(t *testing.T) {
	client, _ := shared(t)
	p := policy.MustNew(client, "api", core.PerMinute(1))
	skip := grpcrl.WithSkip(func(_ context.Context, method string) bool { return method != unaryMethod })
	conn, svc := serve(t, []grpc.ServerOption{
		grpc.UnaryInterceptor(grpcrl.UnaryServerInterceptor(p, skip)),
		grpc.StreamInterceptor(grpcrl.StreamServerInterceptor(p, skip)),
	})
	for range 3 {
		header, err := invoke(t, conn, otherMethod)
		require.NoError(t, err)
		assert.Empty(t, header.Get("ratelimit"), "a skipped call carries no rate limit fields")
		stream, err := conn.NewStream(context.Background(), &serviceDesc.Streams[0], streamMethod)
		require.NoError(t, err)
		require.NoError(t, stream.SendMsg(&emptypb.Empty{}))
		require.NoError(t, stream.CloseSend())
		for range 3 {
			require.NoError(t, stream.RecvMsg(new(wrapperspb.StringValue)))
		}
	}
	_, err := invoke(t, conn, unaryMethod)
	require.NoError(t, err)
	_, err = invoke(t, conn, unaryMethod)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the call not skipped is limited")
	assert.EqualValues(t, 7, svc.served.Load())
}

// TestDeny checks a refusal over the limit: ResourceExhausted, with a
// RetryInfo that is the exact wait (the decision's, as the observer saw it)
// rounded up to the second, as retry-after is, and a QuotaFailure naming
// the policy.
func TestDeny(t *testing.T) {
	client, _ := shared(t)
	rec := &recorder{}
	conn := unary(t, policy.MustNew(client, "api", core.Rate{Permits: 2, Interval: 10 * time.Second}, policy.WithObserver(rec)))
	for range 2 {
		_, err := invoke(t, conn, unaryMethod)
		require.NoError(t, err)
	}
	header, err := invoke(t, conn, unaryMethod)
	require.Error(t, err)
	st := status.Convert(err)
	assert.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, "The request quota of this client is used up; retry after the time in Retry-After.", st.Message())

	d := rec.last(t)
	require.Equal(t, observe.Denied, d.Outcome)
	require.Positive(t, d.RetryAfter)
	require.LessOrEqual(t, d.RetryAfter, 10*time.Second)
	want := ceilSecond(d.RetryAfter)
	retry, quota := details(t, err)
	require.NotNil(t, retry, "RetryInfo")
	assert.Equal(t, want, retry.GetRetryDelay().AsDuration(), "RetryInfo is the exact wait %v rounded up", d.RetryAfter)
	require.NotNil(t, quota, "QuotaFailure")
	require.Len(t, quota.GetViolations(), 1)
	assert.Equal(t, "api", quota.GetViolations()[0].GetSubject())
	assert.Equal(t, st.Message(), quota.GetViolations()[0].GetDescription())

	secs := strconv.FormatInt(int64(want/time.Second), 10)
	assert.Equal(t, []string{secs}, header.Get("retry-after"))
	assert.Equal(t, []string{`"api";r=0;t=` + secs}, header.Get("ratelimit"))
	assert.Equal(t, []string{"0"}, header.Get("x-ratelimit-remaining"))
	assert.Equal(t, []string{secs}, header.Get("x-ratelimit-reset"))
}

// TestCostAboveRate: a call that costs more than the rate grants in a
// window is ResourceExhausted with the QuotaFailure but no RetryInfo,
// since no wait can serve it.
func TestCostAboveRate(t *testing.T) {
	client, _ := shared(t)
	conn := unary(t, policy.MustNew(client, "api", core.PerMinute(3), policy.WithCostFunc(func(keyfunc.Request) (int64, error) {
		return 5, nil
	})))
	_, err := invoke(t, conn, unaryMethod)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	retry, quota := details(t, err)
	assert.Nil(t, retry, "no RetryInfo: waiting cannot help")
	require.NotNil(t, quota)
	assert.Equal(t, "api", quota.GetViolations()[0].GetSubject())
}

func TestBadCost(t *testing.T) {
	client, _ := shared(t)
	var reported atomic.Int64
	conn := unary(t, policy.MustNew(client, "api", core.PerMinute(3), policy.WithCostFunc(func(keyfunc.Request) (int64, error) {
		return 0, errors.New("no cost")
	})), grpcrl.WithErrorHandler(func(context.Context, error) { reported.Add(1) }))
	_, err := invoke(t, conn, unaryMethod)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Empty(t, status.Convert(err).Details())
	assert.Equal(t, int64(1), reported.Load(), "the cost function's error goes to the error handler")
}

// TestWait: in wait mode a call over the limit waits for its permit and is
// served, or is refused at once when the wait cannot fit in its deadline.
func TestWait(t *testing.T) {
	client, _ := shared(t)
	t.Run("waits", func(t *testing.T) {
		rec := &recorder{}
		conn := unary(t, policy.MustNew(client, "short", core.Rate{Permits: 1, Interval: 300 * time.Millisecond},
			policy.WithWait(5*time.Second), policy.WithObserver(rec)))
		_, err := invoke(t, conn, unaryMethod)
		require.NoError(t, err)
		_, err = invoke(t, conn, unaryMethod)
		require.NoError(t, err)
		assert.Equal(t, observe.WaitedAllowed, rec.last(t).Outcome)
	})
	t.Run("deadline", func(t *testing.T) {
		rec := &recorder{}
		conn := unary(t, policy.MustNew(client, "long", core.PerMinute(1),
			policy.WithWait(2*time.Minute), policy.WithObserver(rec)))
		_, err := invoke(t, conn, unaryMethod)
		require.NoError(t, err)
		// The wait (a minute) fits in the policy's, not in the call's
		// deadline: refused at once, not after waiting until the deadline.
		_, err = invokeWithin(t, conn, 5*time.Second, unaryMethod)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		d := rec.last(t)
		assert.Equal(t, observe.Denied, d.Outcome)
		assert.Less(t, d.Latency, 5*time.Second)
	})
}

func TestDryRun(t *testing.T) {
	client, _ := shared(t)
	rec := &recorder{}
	conn := unary(t, policy.MustNew(client, "api", core.PerMinute(1), policy.WithDryRun(), policy.WithObserver(rec)))
	_, err := invoke(t, conn, unaryMethod)
	require.NoError(t, err)
	header, err := invoke(t, conn, unaryMethod)
	require.NoError(t, err, "a dry run serves the call over the limit")
	assert.Equal(t, observe.DryRunDenied, rec.last(t).Outcome)
	require.Len(t, header.Get("ratelimit"), 1)
	assert.Regexp(t, `^"api";r=0;t=\d+$`, header.Get("ratelimit")[0])
	assert.Equal(t, []string{"0"}, header.Get("x-ratelimit-remaining"))
	assert.Empty(t, header.Get("retry-after"))
}

// TestAPIKey limits by an API key from the call's metadata; a call without
// one is refused under WithMissingKeyDeny.
func TestAPIKey(t *testing.T) {
	client, _ := shared(t)
	for _, name := range []string{"x-api-key", "X-Api-Key"} {
		t.Run(name, func(t *testing.T) {
			conn := unary(t, policy.MustNew(client, "key"+strconv.Itoa(len(name))+name[:1], core.PerMinute(1),
				policy.WithKey(keyfunc.APIKey(name)), policy.WithMissingKeyDeny()))
			_, err := invoke(t, conn, unaryMethod, "x-api-key", "alpha")
			require.NoError(t, err)
			_, err = invoke(t, conn, unaryMethod, "x-api-key", "alpha")
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			_, err = invoke(t, conn, unaryMethod, "x-api-key", "beta")
			assert.NoError(t, err, "another key has its own limit")
			_, err = invoke(t, conn, unaryMethod)
			assert.Equal(t, codes.PermissionDenied, status.Code(err))
		})
	}
}

// TestRouteKey limits by the full method, as "POST /pkg.Service/Method".
func TestRouteKey(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	pre := prefix(t)
	client, err := core.New(rdb, core.WithKeyPrefix(pre))
	require.NoError(t, err)
	conn := unary(t, policy.MustNew(client, "route", core.PerMinute(1), policy.WithKey(keyfunc.Route())))
	for _, method := range []string{unaryMethod, otherMethod} {
		_, err := invoke(t, conn, method)
		require.NoError(t, err, method)
		_, err = invoke(t, conn, method)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), method)
		log := "{" + pre + "route:" + keyfunc.Escape(method) + "}:permits"
		n, err := rdb.ZCard(context.Background(), log).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "one grant in %s", log)
	}
}

// TestUnknownMethodsAreOneRoute: the calls of a server's unknown-service
// handler, whose method the client chooses, share one route key, so that
// made-up methods buy no budget; the server's own methods keep theirs.
func TestUnknownMethodsAreOneRoute(t *testing.T) {
	client, _ := shared(t)
	p := policy.MustNew(client, "route", core.PerMinute(2), policy.WithKey(keyfunc.Route()))
	proxy := func(_ any, ss grpc.ServerStream) error { // answers any method
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		return ss.SendMsg(wrapperspb.String("proxied"))
	}
	conn, _ := serve(t, []grpc.ServerOption{
		grpc.UnaryInterceptor(grpcrl.UnaryServerInterceptor(p)),
		grpc.StreamInterceptor(grpcrl.StreamServerInterceptor(p)),
		grpc.UnknownServiceHandler(proxy),
	})
	served := 0
	for i := range 6 {
		if _, err := invoke(t, conn, "/made.Up/Method"+strconv.Itoa(i)); err == nil {
			served++
		} else {
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		}
	}
	assert.Equal(t, 2, served, "2 a minute for all the methods the server does not know")
	_, err := invoke(t, conn, unaryMethod)
	assert.NoError(t, err, "a method of the server's own has its route")
}

// TestStatusOfCodes checks the HTTP status that Decision.Done, and so
// WithRefund, sees for each code a handler returns.
func TestStatusOfCodes(t *testing.T) {
	client, _ := shared(t)
	var mu sync.Mutex
	var seen []int
	conn := unary(t, policy.MustNew(client, "api", core.PerMinute(100), policy.WithRefund(func(status int) bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, status)
		return false
	})))
	for _, c := range []struct {
		ask  string
		want int
	}{
		{"", 200}, {"3", 400}, {"16", 401}, {"7", 403}, {"5", 404}, {"8", 429}, {"12", 501},
		{"14", 503}, {"4", 504}, {"13", 500}, {"9", 500}, {"2", 500}, {"context", 500},
	} {
		kv := []string{codeKey, c.ask}
		if c.ask == "" {
			kv = nil
		}
		_, _ = invoke(t, conn, unaryMethod, kv...)
		mu.Lock()
		require.NotEmpty(t, seen)
		assert.Equal(t, c.want, seen[len(seen)-1], "code %s", c.ask)
		mu.Unlock()
	}
}

// TestRefund: with WithRefundFailed, calls that fail give their permits
// back, and only the successful ones count.
func TestRefund(t *testing.T) {
	client, _ := shared(t)
	conn := unary(t, policy.MustNew(client, "api", core.PerMinute(1), policy.WithRefundFailed()))
	for range 3 {
		_, err := invoke(t, conn, unaryMethod, codeKey, strconv.Itoa(int(codes.NotFound)))
		assert.Equal(t, codes.NotFound, status.Code(err), "served: the failed calls before took nothing")
	}
	_, err := invoke(t, conn, unaryMethod)
	require.NoError(t, err)
	_, err = invoke(t, conn, unaryMethod)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}

// TestRedisDown stops a Redis of the test's own and checks each failure
// policy.
func TestRedisDown(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	client := newClient(t, srv.Client(t))
	require.NoError(t, srv.Stop())

	t.Run("closed", func(t *testing.T) {
		conn := unary(t, policy.MustNew(client, "closed", core.PerMinute(10), policy.WithFailClosed()))
		header, err := invoke(t, conn, unaryMethod)
		st := status.Convert(err)
		assert.Equal(t, codes.Unavailable, st.Code())
		assert.Equal(t, "The request could not be checked against its rate limit; retry after the time in Retry-After.", st.Message(),
			"the policy's detail, not Redis's error")
		assert.Equal(t, []string{"1"}, header.Get("retry-after"))
	})
	t.Run("open", func(t *testing.T) {
		var mu sync.Mutex
		var reported []error
		conn := unary(t, policy.MustNew(client, "open", core.PerMinute(1), policy.WithFailOpen()),
			grpcrl.WithErrorHandler(func(_ context.Context, err error) {
				mu.Lock()
				defer mu.Unlock()
				reported = append(reported, err)
			}))
		for range 3 {
			_, err := invoke(t, conn, unaryMethod)
			assert.NoError(t, err, "served without a decision")
		}
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, reported, 3, "each call's error goes to the error handler")
		for _, err := range reported {
			assert.ErrorContains(t, err, "policy open: core: ", "why Redis could not decide")
		}
	})
	t.Run("local", func(t *testing.T) {
		rec := &recorder{}
		// Two instances share 4 a minute: this one serves 2.
		conn := unary(t, policy.MustNew(client, "local", core.PerMinute(4), policy.WithFailLocal(2), policy.WithObserver(rec)))
		for i := range 2 {
			_, err := invoke(t, conn, unaryMethod)
			require.NoError(t, err, "call %d", i+1)
			assert.Equal(t, observe.FallbackAllowed, rec.last(t).Outcome)
		}
		_, err := invoke(t, conn, unaryMethod)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, observe.FallbackDenied, rec.last(t).Outcome)
		retry, _ := details(t, err)
		require.NotNil(t, retry)
		assert.Equal(t, ceilSecond(rec.last(t).RetryAfter), retry.GetRetryDelay().AsDuration())
	})
}

// TestStream: the stream interceptor decides a stream once, at its start;
// its messages are not limited.
func TestStream(t *testing.T) {
	client, _ := shared(t)
	p := policy.MustNew(client, "streams", core.PerMinute(1))
	conn, svc := serve(t, []grpc.ServerOption{grpc.StreamInterceptor(grpcrl.StreamServerInterceptor(p))})

	open := func() (metadata.MD, []string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs, err := conn.NewStream(ctx, &serviceDesc.Streams[0], streamMethod)
		require.NoError(t, err)
		require.NoError(t, cs.SendMsg(&emptypb.Empty{}))
		require.NoError(t, cs.CloseSend())
		var got []string
		for {
			m := new(wrapperspb.StringValue)
			if err := cs.RecvMsg(m); err != nil {
				header, _ := cs.Header()
				if errors.Is(err, io.EOF) {
					err = nil
				}
				return header, got, err
			}
			got = append(got, m.GetValue())
		}
	}
	header, got, err := open()
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "1", "2"}, got, "every message of the stream")
	assert.Equal(t, []string{`"streams";q=1;w=60`}, header.Get("ratelimit-policy"))
	assert.Equal(t, []string{"0"}, header.Get("x-ratelimit-remaining"))

	header, got, err = open()
	assert.Empty(t, got)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	retry, quota := details(t, err)
	assert.NotNil(t, retry)
	assert.NotNil(t, quota)
	assert.NotEmpty(t, header.Get("retry-after"))
	assert.Equal(t, int64(1), svc.served.Load(), "the refused stream never reached its handler")
}

// TestChain applies two policies to each call, and checks that they share
// the call's context, unary and streaming: when the second refuses a call,
// the first gives its grant back; and the last value of each field is the
// call's.
func TestChain(t *testing.T) {
	client, _ := shared(t)
	for _, kind := range []string{"unary", "stream"} {
		t.Run(kind, func(t *testing.T) {
			rec := &recorder{}
			global := policy.MustNew(client, kind+"-global", core.PerMinute(10), policy.WithObserver(rec))
			strict := policy.MustNew(client, kind+"-strict", core.PerMinute(1))
			var opt grpc.ServerOption
			var call func() (metadata.MD, error)
			if kind == "unary" {
				opt = grpc.ChainUnaryInterceptor(grpcrl.UnaryServerInterceptor(global), grpcrl.UnaryServerInterceptor(strict))
			} else {
				opt = grpc.ChainStreamInterceptor(grpcrl.StreamServerInterceptor(global), grpcrl.StreamServerInterceptor(strict))
			}
			conn, _ := serve(t, []grpc.ServerOption{opt})
			if kind == "unary" {
				call = func() (metadata.MD, error) { return invoke(t, conn, unaryMethod) }
			} else {
				call = func() (metadata.MD, error) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					cs, err := conn.NewStream(ctx, &serviceDesc.Streams[0], streamMethod)
					require.NoError(t, err)
					require.NoError(t, cs.SendMsg(&emptypb.Empty{}))
					require.NoError(t, cs.CloseSend())
					for err == nil {
						err = cs.RecvMsg(new(wrapperspb.StringValue))
					}
					header, _ := cs.Header()
					if errors.Is(err, io.EOF) {
						err = nil
					}
					return header, err
				}
			}
			header, err := call()
			require.NoError(t, err)
			last := func(key string) string { v := header.Get(key); require.NotEmpty(t, v, key); return v[len(v)-1] }
			assert.Equal(t, `"`+kind+`-global";q=10;w=60, "`+kind+`-strict";q=1;w=60`, last("ratelimit-policy"))
			assert.Regexp(t, `^"`+kind+`-global";r=9;t=\d+, "`+kind+`-strict";r=0;t=\d+$`, last("ratelimit"))
			assert.Equal(t, "0", last("x-ratelimit-remaining"), "the policy with the fewest permits left")

			header, err = call()
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Equal(t, "0", last("x-ratelimit-remaining"))
			assert.NotEmpty(t, last("retry-after"))
			_, _ = call()
			// 3 grants by the global policy, the last 2 given back: 8 left.
			assert.Equal(t, int64(8), rec.last(t).Remaining)
		})
	}
}

// TestClientPaces: the client interceptor spaces calls by the limiter's
// rate, as the grant times Redis recorded in the limiter's log show.
func TestClientPaces(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	pre := prefix(t)
	client, err := core.New(rdb, core.WithKeyPrefix(pre))
	require.NoError(t, err)
	interval := 250 * time.Millisecond
	l := client.Limiter("upstream", core.WithRate(core.Rate{Permits: 1, Interval: interval}))
	conn, svc := serve(t, nil, grpc.WithUnaryInterceptor(grpcrl.UnaryClientInterceptor(l)))
	ctx := context.Background()
	var grants []float64
	for range 4 {
		_, err := invoke(t, conn, unaryMethod)
		require.NoError(t, err)
		newest, err := rdb.ZRevRangeWithScores(ctx, "{"+pre+"upstream}:permits", 0, 0).Result()
		require.NoError(t, err)
		require.Len(t, newest, 1)
		grants = append(grants, newest[0].Score)
	}
	for i := 1; i < len(grants); i++ {
		assert.GreaterOrEqual(t, grants[i]-grants[i-1], float64(interval.Milliseconds()), "grant %d came %v ms after the one before", i+1, grants[i]-grants[i-1])
	}
	assert.Equal(t, int64(4), svc.served.Load())
}

// TestClientRefuses: a call that cannot get a permit before its deadline
// is not sent and fails with DeadlineExceeded; with Redis down, with
// Unavailable.
func TestClientRefuses(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	pre := prefix(t)
	client, err := core.New(rdb, core.WithKeyPrefix(pre))
	require.NoError(t, err)
	l := client.Limiter("upstream", core.WithRate(core.PerMinute(1)))
	conn, svc := serve(t, nil, grpc.WithUnaryInterceptor(grpcrl.UnaryClientInterceptor(l)))
	_, err = invoke(t, conn, unaryMethod)
	require.NoError(t, err)
	_, err = invokeWithin(t, conn, time.Second, unaryMethod)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
	assert.Equal(t, int64(1), svc.served.Load(), "the call without a permit was not sent")
	n, err := rdb.ZCard(context.Background(), "{"+pre+"upstream}:permits").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "one grant in the limiter's log")

	down, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = down.Stop() })
	gone := newClient(t, down.Client(t)).Limiter("upstream", core.WithRate(core.PerMinute(1)))
	require.NoError(t, down.Stop())
	conn, svc = serve(t, nil, grpc.WithUnaryInterceptor(grpcrl.UnaryClientInterceptor(gone)))
	_, err = invoke(t, conn, unaryMethod)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Zero(t, svc.served.Load())
}

// A nil policy is a mistake in the program: the interceptors panic at once.
func TestNilPolicyPanics(t *testing.T) {
	assert.PanicsWithValue(t, "grpcrl.UnaryServerInterceptor: nil *policy.Policy", func() { grpcrl.UnaryServerInterceptor(nil) })
	assert.PanicsWithValue(t, "grpcrl.StreamServerInterceptor: nil *policy.Policy", func() { grpcrl.StreamServerInterceptor(nil) })
}
