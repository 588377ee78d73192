package core

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/slot"
)

// Limiter is one named rate limiter in Redis. Limiters are cheap values
// around a name: create them freely, for instance one per client IP.
// A Limiter is safe for concurrent use by multiple goroutines.
type Limiter struct {
	c       *Client
	name    string
	keys    [5]string     // config, value, value:<id>, permits, permits:<id>
	buf     [keyBuf]byte  // holds name and keys when they fit: one allocation
	err     error         // a bad name or option, returned by every call
	coded   *codedRate    // the rate given with WithRate, or nil
	timeout time.Duration // bound of each round trip, when > 0
	slot    uint16        // the Cluster hash slot of its keys, when batched per slot
}

// codedRate is a rate given with WithRate, with its script arguments
// formatted once.
type codedRate struct {
	rate Rate
	args [4]string // rate, interval ms, type, keepAlive ms
}

// A LimiterOption configures a Limiter.
type LimiterOption interface {
	apply(*Limiter) error
}

type limiterOptionFunc func(*Limiter) error

func (f limiterOptionFunc) apply(l *Limiter) error { return f(l) }

// WithRate gives the limiter a code-defined rate. Each decision then creates
// the rate in Redis if it is absent and updates it in place, keeping the
// history, if the stored rate differs: one round trip, never
// ErrNotInitialized. The limiter's keys always expire when it is idle: a zero
// r.KeepAlive means r.Interval, after which an idle limiter is full again
// anyway. When several processes give different rates for one name, the
// last writer wins.
func WithRate(r Rate) LimiterOption {
	if err := r.Validate(); err != nil {
		return limiterOptionFunc(func(*Limiter) error { return err })
	}
	r = r.withKeepAlive()
	cr := &codedRate{rate: r, args: rateStrings(r)}
	return limiterOptionFunc(func(l *Limiter) error {
		l.coded = cr
		return nil
	})
}

// WithCallTimeout bounds every round trip to Redis made by the limiter to d,
// on top of the context's own deadline. Waits in TryAcquireWithin and
// Acquire are not round trips: they end with the context or their maximum
// wait, and each attempt they make gets its own d. A call that runs out of
// time returns an error wrapping context.DeadlineExceeded. The default, 0,
// leaves the context alone.
func WithCallTimeout(d time.Duration) LimiterOption {
	return limiterOptionFunc(func(l *Limiter) error {
		if d < 0 {
			return fmt.Errorf("%w: negative call timeout %v", ErrInvalidOption, d)
		}
		l.timeout = d
		return nil
	})
}

// Limiter returns the limiter called name (after the Client's key prefix).
// It does no I/O, and copies name: the caller may reuse the string's memory
// once Limiter returns. An invalid name or option is reported by every call made
// on the returned Limiter, as an error wrapping ErrInvalidName or the
// option's error.
func (c *Client) Limiter(name string, opts ...LimiterOption) *Limiter {
	l := &Limiter{c: c}
	c.keysFor(l, name)
	if c.slots != nil {
		l.slot = uint16(slot.Of(l.name))
	}
	if l.err = checkName(l.name); l.err != nil {
		return l
	}
	for _, o := range opts {
		if o == nil {
			l.err = fmt.Errorf("%w: nil limiter option", ErrInvalidOption)
			return l
		}
		if l.err = o.apply(l); l.err != nil {
			return l
		}
	}
	return l
}

// Name returns the limiter's name in Redis: the Client's key prefix and the
// name given to Limiter. It is the key of the limiter's config hash.
func (l *Limiter) Name() string { return l.name }

// Result is the outcome of one acquire decision.
type Result struct {
	// Allowed reports whether the permits were granted.
	Allowed bool
	// Remaining is the number of permits available after this call.
	Remaining int64
	// RetryAfter is zero when Allowed; otherwise the exact time until the
	// requested permits will be available (unless others take them first).
	RetryAfter time.Duration
	// ResetAfter is the time until every permit issued so far has come back
	// and the limiter is full again.
	ResetAfter time.Duration
	// Rate is the rate in force, as stored in Redis.
	Rate Rate

	at int64 // Redis server time of the decision, in Unix milliseconds
}

// TrySetRate stores r as the limiter's rate if the limiter has none, and
// reports whether it did. It never changes an existing rate or any state.
func (l *Limiter) TrySetRate(ctx context.Context, r Rate) (bool, error) {
	if err := l.check(r); err != nil {
		return false, err
	}
	n, err := l.eval(ctx, scriptTrySetRate, l.keys[:1], rateArgs(r)...).Int64()
	if err != nil {
		return false, fmt.Errorf("core: try set rate: %w", err)
	}
	return n == 1, nil
}

// SetRate stores r as the limiter's rate, replacing any other, and resets
// the state: every permit is available again (for PerClient, this Client's).
// A zero r.KeepAlive removes any TTL from the config.
func (l *Limiter) SetRate(ctx context.Context, r Rate) error {
	_, err := l.setRate(ctx, r, "set")
	return err
}

// UpdateRate replaces the limiter's rate with r and keeps the permits granted
// in the new window: the permits available become max(0, r.Permits - permits
// granted within the last r.Interval). A change of Type clears the state.
// It reports false, writing nothing, when the limiter has no rate.
func (l *Limiter) UpdateRate(ctx context.Context, r Rate) (bool, error) {
	return l.setRate(ctx, r, "update")
}

func (l *Limiter) setRate(ctx context.Context, r Rate, mode string) (bool, error) {
	if err := l.check(r); err != nil {
		return false, err
	}
	defer l.forget()
	args := append(rateArgs(r), mode)
	n, err := l.eval(ctx, scriptSetRate, l.keys[:], args...).Int64()
	if err != nil {
		return false, fmt.Errorf("core: %s rate: %w", mode, err)
	}
	return n == 1, nil
}

// Config returns the rate stored in Redis, or an error wrapping
// ErrNotInitialized when there is none.
func (l *Limiter) Config(ctx context.Context) (Rate, error) {
	if l.err != nil {
		return Rate{}, l.err
	}
	v, err := l.eval(ctx, scriptConfig, l.keys[:1]).Int64Slice()
	if err != nil {
		return Rate{}, fmt.Errorf("core: config: %w", err)
	}
	if err := replyError(v, 0); err != nil {
		return Rate{}, err
	}
	return parseRate(v[1:]), nil
}

// TryAcquire takes permits if they are available now and never waits.
// A denial is not an error: Result.Allowed is false and Result.RetryAfter
// says when the permits will be available.
func (l *Limiter) TryAcquire(ctx context.Context, permits int64) (Result, error) {
	if err := l.checkPermits(permits); err != nil {
		return Result{}, err
	}
	return l.acquire(ctx, permits)
}

func (l *Limiter) acquire(ctx context.Context, permits int64) (Result, error) {
	var sent time.Time
	if dc := l.c.denials; dc != nil {
		sent = l.c.clock.Now()
		if r, ok := dc.get(l.name, permits, sent); ok {
			return r, nil
		}
	}
	ctx, cancel := l.callContext(ctx)
	var v [10]int64
	n, err := l.c.evalAcquire(ctx, l, permits, &v)
	cancel()
	if err != nil {
		return Result{}, fmt.Errorf("core: acquire: %w", err)
	}
	if err := replyError(v[:n], permits); err != nil {
		return Result{}, err
	}
	r := Result{
		Allowed:    v[1] == 1,
		Remaining:  v[2],
		RetryAfter: time.Duration(v[3]) * time.Millisecond,
		ResetAfter: time.Duration(v[4]) * time.Millisecond,
		at:         v[5],
	}
	switch {
	case n == 10:
		r.Rate = parseRate(v[6:10])
	case l.coded != nil && n == 6:
		r.Rate = l.coded.rate
	default:
		return Result{}, fmt.Errorf("core: acquire: unexpected reply of %d values", n)
	}
	if !r.Allowed && l.c.denials != nil {
		l.c.denials.put(l.name, permits, sent, l.c.clock.Now(), r)
	}
	return r, nil
}

// forget drops the limiter's cached denial after a change that may free
// permits early.
func (l *Limiter) forget() {
	if l.c.denials != nil {
		l.c.denials.drop(l.name)
	}
}

// TryAcquireWithin takes permits, waiting up to maxWait for them. It waits
// only when the exact time until the permits are available fits in what is
// left of maxWait and of ctx's deadline; otherwise it returns the denial at
// once (Redisson sleeps out the whole timeout). A negative maxWait counts as
// zero. Cancelling ctx ends the wait with ctx's error.
func (l *Limiter) TryAcquireWithin(ctx context.Context, permits int64, maxWait time.Duration) (Result, error) {
	if err := l.checkPermits(permits); err != nil {
		return Result{}, err
	}
	clk := l.c.clock
	deadline := clk.Now().Add(max(maxWait, 0))
	for {
		r, err := l.acquire(ctx, permits)
		if err != nil || r.Allowed {
			return r, err
		}
		left := deadline.Sub(clk.Now())
		if d, ok := ctx.Deadline(); ok {
			left = min(left, time.Until(d))
		}
		if r.RetryAfter > left {
			return r, nil
		}
		if err := clk.Sleep(ctx, min(r.RetryAfter+jitter(r.RetryAfter), left)); err != nil {
			return Result{}, fmt.Errorf("core: try acquire within: %w", err)
		}
	}
}

// Acquire takes permits, waiting as long as it takes. It returns early with
// an error wrapping context.DeadlineExceeded when the permits will not be
// available before ctx's deadline, and with ctx's error when ctx is done.
func (l *Limiter) Acquire(ctx context.Context, permits int64) error {
	if err := l.checkPermits(permits); err != nil {
		return err
	}
	for {
		r, err := l.acquire(ctx, permits)
		if err != nil || r.Allowed {
			return err
		}
		wait := r.RetryAfter + jitter(r.RetryAfter)
		if d, ok := ctx.Deadline(); ok && time.Until(d) < r.RetryAfter {
			return fmt.Errorf("core: acquire: permits not available before the deadline: %w", context.DeadlineExceeded)
		}
		if err := l.c.clock.Sleep(ctx, wait); err != nil {
			return fmt.Errorf("core: acquire: %w", err)
		}
	}
}

// Release gives permits back: they are available again at once, and the
// grants that held them no longer count, so they are never credited twice.
// The most recent grants are released first. Permits beyond those held are
// ignored: a limiter never holds more than its rate. Release is not
// idempotent: a call resent after a lost reply releases twice.
func (l *Limiter) Release(ctx context.Context, permits int64) error {
	if err := l.checkPermits(permits); err != nil {
		return err
	}
	defer l.forget()
	args := append([]any{permits}, l.codedArgs()...)
	v, err := l.eval(ctx, scriptRelease, l.keys[:], args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("core: release: %w", err)
	}
	return replyError(v, permits)
}

// AvailablePermits returns the number of permits available now. It writes
// nothing. A limiter with a WithRate rate and no state in Redis is full.
func (l *Limiter) AvailablePermits(ctx context.Context) (int64, error) {
	if l.err != nil {
		return 0, l.err
	}
	v, err := l.eval(ctx, scriptAvailable, l.keys[:], l.codedArgs()...).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("core: available permits: %w", err)
	}
	if err := replyError(v, 0); err != nil {
		return 0, err
	}
	return v[1], nil
}

// Expire sets a TTL on all of the limiter's keys (for PerClient, this
// Client's own) and reports whether any key exists. A limiter with a
// KeepAlive renews it on its next write.
func (l *Limiter) Expire(ctx context.Context, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond || ttl%time.Millisecond != 0 {
		return false, fmt.Errorf("%w: ttl %v is not a whole number of milliseconds >= 1ms", ErrInvalidDuration, ttl)
	}
	return l.expire(ctx, ttl.Milliseconds())
}

// ClearExpire removes the TTL of all of the limiter's keys and reports
// whether any key had one. A limiter with a KeepAlive sets it again on its
// next write, and the state keys of one without get one interval.
func (l *Limiter) ClearExpire(ctx context.Context) (bool, error) {
	return l.expire(ctx, 0)
}

func (l *Limiter) expire(ctx context.Context, ms int64) (bool, error) {
	if l.err != nil {
		return false, l.err
	}
	n, err := l.eval(ctx, scriptExpire, l.keys[:], ms).Int64()
	if err != nil {
		return false, fmt.Errorf("core: expire: %w", err)
	}
	return n == 1, nil
}

// Delete removes the limiter's config and state (for PerClient, this
// Client's state; other clients' expire on their own) and reports whether
// anything was deleted.
func (l *Limiter) Delete(ctx context.Context) (bool, error) {
	if l.err != nil {
		return false, l.err
	}
	defer l.forget()
	ctx, cancel := l.callContext(ctx)
	defer cancel()
	var del *redis.IntCmd // written by f; read only once f is done
	err := l.c.guard(ctx, func(ctx context.Context) { del = l.c.rdb.Del(ctx, l.keys[:]...) })
	var n int64
	if err == nil {
		n, err = del.Result()
		err = deadlineError(ctx, err)
	}
	if err = l.c.failed(err); err != nil {
		return false, fmt.Errorf("core: delete: %w", err)
	}
	return n > 0, nil
}

// eval runs a script on the limiter's keys within the call timeout. The
// reply is read before eval returns.
func (l *Limiter) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	ctx, cancel := l.callContext(ctx)
	defer cancel()
	var out *redis.Cmd // written by f; read only once f is done
	if err := l.c.guard(ctx, func(ctx context.Context) { out = s.Run(ctx, l.c.rdb, keys, args...) }); err != nil {
		failed := redis.NewCmd(ctx)
		failed.SetErr(l.c.failed(err))
		return failed
	}
	if err := deadlineError(ctx, l.c.failed(out.Err())); err != out.Err() {
		out.SetErr(err)
	}
	return out
}

func (l *Limiter) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, noCancel
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= l.timeout {
		return ctx, noCancel // ctx ends first anyway
	}
	return context.WithTimeout(ctx, l.timeout)
}

func noCancel() {}

// check validates the limiter and a rate argument before any I/O.
func (l *Limiter) check(r Rate) error {
	if l.err != nil {
		return l.err
	}
	return r.Validate()
}

// checkPermits validates the limiter and a permit count before any I/O.
func (l *Limiter) checkPermits(n int64) error {
	switch {
	case l.err != nil:
		return l.err
	case n < 1 || n > MaxPermits:
		return fmt.Errorf("%w: %d not in [1, %d]", ErrInvalidPermits, n, int64(MaxPermits))
	case l.coded != nil && n > l.coded.rate.Permits:
		return fmt.Errorf("%w: %d permits, rate %d", ErrPermitsExceedRate, n, l.coded.rate.Permits)
	}
	return nil
}

// replyError maps a script's reply code to this package's errors.
func replyError(v []int64, permits int64) error {
	if len(v) == 0 {
		return fmt.Errorf("core: empty script reply")
	}
	switch v[0] {
	case codeOK:
		return nil
	case codeNotInitialized:
		return ErrNotInitialized
	case codeExceedsRate:
		if len(v) > 1 {
			return fmt.Errorf("%w: %d permits, rate %d", ErrPermitsExceedRate, permits, v[1])
		}
		return ErrPermitsExceedRate
	case codeInvalidConfig:
		return ErrInvalidConfig
	}
	return fmt.Errorf("core: unknown script reply code %d", v[0])
}

// parseRate reads {rate, interval ms, type, keepAlive ms}.
func parseRate(v []int64) Rate {
	return Rate{
		Type:      RateType(v[2]),
		Permits:   v[0],
		Interval:  time.Duration(v[1]) * time.Millisecond,
		KeepAlive: time.Duration(v[3]) * time.Millisecond,
	}
}

// rateStrings formats r as the scripts take it: rate, interval ms, type,
// keepAlive ms.
func rateStrings(r Rate) [4]string {
	return [4]string{
		strconv.FormatInt(r.Permits, 10),
		strconv.FormatInt(r.Interval.Milliseconds(), 10),
		strconv.Itoa(int(r.Type)),
		strconv.FormatInt(r.KeepAlive.Milliseconds(), 10),
	}
}

// rateArgs formats r as script arguments.
func rateArgs(r Rate) []any {
	a := rateStrings(r)
	return []any{a[0], a[1], a[2], a[3]}
}

// codedArgs returns the code-defined rate's script arguments, or none.
func (l *Limiter) codedArgs() []any {
	if l.coded == nil {
		return nil
	}
	a := &l.coded.args
	return []any{&a[0], &a[1], &a[2], &a[3]}
}

// putMember writes the log member of one acquire into m: Redisson's
// 21-byte layout, the byte 0x10, a random 16-byte id, then the permits as a
// little-endian uint32. The id also makes the acquire idempotent: a resent
// script finds its member and does not consume again.
func putMember(m *[21]byte, permits int64) {
	m[0] = 16
	binary.LittleEndian.PutUint64(m[1:], rand.Uint64())
	binary.LittleEndian.PutUint64(m[9:], rand.Uint64())
	binary.LittleEndian.PutUint32(m[17:], uint32(permits))
}

// jitter returns a small random delay added to a wait, so that waiters that
// were denied together do not all retry in the same millisecond.
func jitter(wait time.Duration) time.Duration {
	limit := min(wait/16, 5*time.Millisecond)
	if limit <= 0 {
		return 0
	}
	return rand.N(limit)
}
