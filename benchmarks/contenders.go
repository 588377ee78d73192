package main

import (
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/redlimit/redlimit/core"
)

// window is the limit window of every contender: limits are permits per
// minute.
const window = time.Minute

// Contender is one rate limiter library under test, built for one limit
// (permits per window). Decide takes one permit for key, or reports that the
// key is over its limit.
type Contender interface {
	Decide(ctx context.Context, key string) (allowed bool, err error)
}

// filler is implemented by contenders that can use up n permits of a key in
// one call. Others are filled with n concurrent Decide calls.
type filler interface {
	Fill(ctx context.Context, key string, n int64) error
}

// library is a contender library and how to build it on the run's client.
type library struct {
	name string
	new  func(rdb *redis.Client, limit int64) (Contender, error)
}

// Library names, as they appear in the results.
const (
	libRedlimit           = "redlimit"
	libRedlimitNoCoalesce = "redlimit (no coalescing)"
	libRedlimitNoCache    = "redlimit (no denial cache)"
	libRedlimitPerClient  = "redlimit PerClient (no denial cache)"
	libRedisRate          = "redis_rate"
	libUlule              = "ulule/limiter"
	libHTTPRate           = "httprate-redis"
	libFloor              = "floor"
	libGrantFloor         = "grant floor (Redisson layout)"
)

var (
	redlimitLib           = library{name: libRedlimit, new: newRedlimit()}
	redlimitNoCoalesceLib = library{name: libRedlimitNoCoalesce, new: newRedlimit(core.WithCoalescing(0))}
	redlimitNoCacheLib    = library{name: libRedlimitNoCache, new: newRedlimit(core.WithDenialCache(0))}
	// PerClient, whose denials once scanned the whole log (scenario d shows
	// they no longer do). A fixed client id: the Client that fills the window
	// and the one measured on it share one budget.
	redlimitPerClientLib = library{name: libRedlimitPerClient, new: newRedlimitType(core.PerClient, core.WithDenialCache(0), core.WithClientID("bench"))}
	redisRateLib         = library{name: libRedisRate, new: newRedisRate}
	ululeLib             = library{name: libUlule, new: newUlule}
	httprateLib          = library{name: libHTTPRate, new: newHTTPRate}
	floorLib             = library{name: libFloor, new: newFloor}
	grantFloorLib        = library{name: libGrantFloor, new: newGrantFloor}
)

// redlimitC is redlimit's core: a Limiter per call with the rate given in
// code, as the middleware does.
type redlimitC struct {
	client *core.Client
	opts   []core.LimiterOption
}

func newRedlimit(opts ...core.Option) func(*redis.Client, int64) (Contender, error) {
	return newRedlimitType(core.Overall, opts...)
}

func newRedlimitType(typ core.RateType, opts ...core.Option) func(*redis.Client, int64) (Contender, error) {
	return func(rdb *redis.Client, limit int64) (Contender, error) {
		c, err := core.New(rdb, opts...)
		if err != nil {
			return nil, err
		}
		rate := core.Rate{Type: typ, Permits: limit, Interval: window}
		return &redlimitC{client: c, opts: []core.LimiterOption{core.WithRate(rate)}}, nil
	}
}

func (r *redlimitC) Decide(ctx context.Context, key string) (bool, error) {
	res, err := r.client.Limiter(key, r.opts...).TryAcquire(ctx, 1)
	return res.Allowed, err
}

// redisRateC is go-redis/redis_rate v10 (GCRA). Burst equals the rate, so a
// full window's permits are available at once, as with the others.
type redisRateC struct {
	l     *redis_rate.Limiter
	limit redis_rate.Limit
}

func newRedisRate(rdb *redis.Client, limit int64) (Contender, error) {
	return &redisRateC{
		l:     redis_rate.NewLimiter(rdb),
		limit: redis_rate.Limit{Rate: int(limit), Burst: int(limit), Period: window},
	}, nil
}

func (r *redisRateC) Decide(ctx context.Context, key string) (bool, error) {
	res, err := r.l.Allow(ctx, key, r.limit)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

// Fill takes n permits in one AllowN call.
func (r *redisRateC) Fill(ctx context.Context, key string, n int64) error {
	res, err := r.l.AllowN(ctx, key, r.limit, int(n))
	if err == nil && res.Allowed != int(n) {
		err = fmt.Errorf("redis_rate: fill granted %d of %d", res.Allowed, n)
	}
	return err
}

// ululeC is ulule/limiter v3 with its Redis store (fixed window, one
// EVALSHA of INCRBY and PEXPIRE or PTTL).
type ululeC struct{ l *ulule.Limiter }

func newUlule(rdb *redis.Client, limit int64) (Contender, error) {
	store, err := ululeredis.NewStore(rdb) // loads its scripts: one round trip now
	if err != nil {
		return nil, err
	}
	return &ululeC{l: ulule.New(store, ulule.Rate{Period: window, Limit: limit})}, nil
}

func (u *ululeC) Decide(ctx context.Context, key string) (bool, error) {
	c, err := u.l.Get(ctx, key)
	return err == nil && !c.Reached, err
}

// Fill counts n requests in one Increment call.
func (u *ululeC) Fill(ctx context.Context, key string, n int64) error {
	_, err := u.l.Increment(ctx, key, n)
	return err
}

// httprateC is go-chi/httprate's RateLimiter on httprate-redis's counter.
// Its only consuming decision is OnLimit, which needs an
// http.ResponseWriter and an *http.Request: it writes the X-RateLimit-*
// headers into a reused discard writer. OnLimit holds one mutex of the
// RateLimiter across its two round trips (MGET, then MULTI INCRBY EXPIRE
// EXEC when allowed), so decisions of one RateLimiter never overlap.
type httprateC struct {
	rl   *httprate.RateLimiter
	base *http.Request
	pool sync.Pool // *discardWriter
}

func newHTTPRate(rdb *redis.Client, limit int64) (Contender, error) {
	counter := httprateredis.WithRedisLimitCounter(&httprateredis.Config{
		Client: rdb,
		// Errors must reach the harness: without this, the counter moves to
		// an in-process fallback silently.
		FallbackDisabled: true,
	})
	onError := httprate.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
		w.(*discardWriter).err = err
	})
	base, err := http.NewRequest(http.MethodGet, "/", nil)
	if err != nil {
		return nil, err
	}
	h := &httprateC{rl: httprate.NewRateLimiter(int(limit), window, counter, onError), base: base}
	h.pool.New = func() any { return &discardWriter{h: http.Header{}} }
	return h, nil
}

func (h *httprateC) Decide(ctx context.Context, key string) (bool, error) {
	w := h.pool.Get().(*discardWriter)
	if w.req == nil || w.req.Context() != ctx {
		w.req = h.base.WithContext(ctx)
	}
	limited := h.rl.OnLimit(w, w.req, key)
	err := w.err
	w.err = nil
	h.pool.Put(w)
	return !limited, err
}

// Fill adds n to the key's counter in the current window, which is aligned
// to the wall clock for Redis counters.
func (h *httprateC) Fill(_ context.Context, key string, n int64) error {
	return h.rl.Counter().IncrementBy(key, time.Now().UTC().Truncate(window), int(n))
}

// discardWriter is the http.ResponseWriter that httprate's OnLimit writes its
// headers to. The header map is reused: OnLimit sets the same names each
// time. It also carries the request and the error of one decision.
type discardWriter struct {
	h   http.Header
	req *http.Request
	err error
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// floorC is the floor: one EVALSHA of "return 1" on the key, one round trip
// that does nothing. It allows everything.
type floorC struct{ rdb *redis.Client }

var floorScript = redis.NewScript("return 1")

func newFloor(rdb *redis.Client, _ int64) (Contender, error) { return floorC{rdb}, nil }

func (f floorC) Decide(ctx context.Context, key string) (bool, error) {
	err := floorScript.Run(ctx, f.rdb, []string{key}).Err()
	return err == nil, err
}

// Fill does nothing: the floor keeps no state.
func (floorC) Fill(context.Context, string, int64) error { return nil }

// grantFloorC is the grant floor: one EVALSHA of lua/grantfloor.lua on the
// key, the four commands of a grant on Redisson's layout (see the script).
// It allows everything.
type grantFloorC struct{ rdb *redis.Client }

//go:embed lua/grantfloor.lua
var grantFloorSrc string

var grantFloorScript = redis.NewScript(grantFloorSrc)

func newGrantFloor(rdb *redis.Client, _ int64) (Contender, error) { return grantFloorC{rdb}, nil }

func (f grantFloorC) Decide(ctx context.Context, key string) (bool, error) {
	tag := "{" + key + "}"
	err := grantFloorScript.Run(ctx, f.rdb, []string{tag, tag + ":value", tag + ":permits"}, logMember()).Err()
	return err == nil, err
}

// Fill does nothing: the grant floor never denies.
func (grantFloorC) Fill(context.Context, string, int64) error { return nil }
