package core

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/slot"
)

// Semaphore is one named semaphore in Redis: at most its permits held at
// once, each by a lease that ends, by Redis's clock, unless it is renewed,
// so that a process that dies holds its permits one lease at most. It
// keeps the layout of Redisson's RPermitExpirableSemaphore, so Java
// services on Redisson and Go services share one semaphore (see the
// package's Semaphores). Semaphores are cheap values around a name.
// A Semaphore is safe for concurrent use by multiple goroutines.
type Semaphore struct {
	// route holds the semaphore's two keys (keys[0] the counter, keys[1]
	// the leases, both declared to the scripts), its call timeout and its
	// Cluster slot, as the Client's round trips take them from a call: a
	// Limiter that is never used to decide a rate.
	route    *Limiter
	channel  string // redisson_sc:{N}: waiters, Redisson's included, listen on it
	publish  string // PUBLISH, or SPUBLISH on a Cluster, as Redisson does by default
	limit    int64  // the limit given with WithPermits, or 0
	limitArg string // limit as the scripts take it: decimal, or "" for none
	err      error  // a bad name or option, returned by every call
}

// maxLeasePermits bounds the permits of one acquire: each is an id, an
// argument of the script.
const maxLeasePermits = 10_000

// leaseIDLen is the length of a permit's id: 16 random bytes, as Redisson's.
const leaseIDLen = 16

// A SemaphoreOption configures a Semaphore.
type SemaphoreOption interface {
	applySemaphore(*Semaphore) error
}

type semaphoreOptionFunc func(*Semaphore) error

func (f semaphoreOptionFunc) applySemaphore(s *Semaphore) error { return f(s) }

// WithPermits gives the semaphore its limit in code: n permits held at
// once at most, from 1 to MaxPermits. Each call then creates the semaphore
// in Redis with n permits if it is absent, and, when another total
// (permits available and held) is stored, brings it back to n, keeping the
// leases held: a limit lowered below the permits held is a debt that later
// acquires wait out. Without it, the semaphore's limit is the total stored
// in Redis (by a Redisson client's trySetPermits, or by a process that gives
// WithPermits), and calls on a semaphore that Redis does not have fail with
// ErrNotInitialized. When several processes give different limits for one
// name, the last writer wins.
func WithPermits(n int64) SemaphoreOption {
	return semaphoreOptionFunc(func(s *Semaphore) error {
		if n < 1 || n > MaxPermits {
			return fmt.Errorf("%w: semaphore of %d permits, not in [1, %d]", ErrInvalidPermits, n, int64(MaxPermits))
		}
		s.limit, s.limitArg = n, strconv.FormatInt(n, 10)
		return nil
	})
}

// Semaphore returns the semaphore called name (after the Client's key
// prefix): at most its permits held at once, each held by a lease that
// ends unless renewed. It does no I/O. An invalid name or option is
// reported by every call made on the returned Semaphore, as an error
// wrapping ErrInvalidName or the option's error.
//
// Its keys are Redisson's: the counter name, the leases {name}:timeout (or
// name:timeout when name has a '{'), and its channel is
// redisson_sc:{name} (or redisson_sc:name). A semaphore and a limiter of
// the same name would share the key name: give them different names.
func (c *Client) Semaphore(name string, opts ...SemaphoreOption) *Semaphore {
	n := c.prefix + name
	leases, channel := "{"+n+"}:timeout", "redisson_sc:{"+n+"}"
	if strings.IndexByte(n, '{') >= 0 {
		leases, channel = n+":timeout", "redisson_sc:"+n
	}
	s := &Semaphore{
		route:   &Limiter{c: c, name: n, keys: [5]string{n, leases}, decl: semaphoreKeys, fixed: true},
		channel: channel,
		publish: "PUBLISH",
	}
	if _, ok := c.rdb.(*redis.ClusterClient); ok {
		// Redisson 3.22+ publishes with SPUBLISH on a Cluster of Redis 7
		// or later, and its waiters listen with SSUBSCRIBE; the scripts
		// fall back to PUBLISH on an older Cluster, as Redisson does.
		s.publish = "SPUBLISH"
	}
	if c.slots != nil {
		s.route.slot = uint16(slot.Of(n))
	}
	if s.err = checkName(n); s.err != nil {
		return s
	}
	for _, o := range opts {
		if o == nil {
			s.err = fmt.Errorf("%w: nil semaphore option", ErrInvalidOption)
			return s
		}
		if s.err = o.applySemaphore(s); s.err != nil {
			return s
		}
	}
	return s
}

// semaphoreKeys are the keys, of a route Limiter's five, that the
// semaphore's scripts declare: the counter and the leases. The channel is
// no key: it is an argument, and hashes to their slot.
var semaphoreKeys = []uint8{0, 1}

// Lease is the permits that one acquire holds: an id per permit, which
// Renew and Release name. The zero Lease (Lease{}) holds nothing.
type Lease struct {
	ids string // the ids, leaseIDLen bytes each, one after the other
}

// newLease returns a lease of permits new random ids.
func newLease(permits int64) Lease {
	b := make([]byte, leaseIDLen*permits)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rand.Uint64())
	}
	return Lease{ids: string(b)}
}

// TryAcquire takes permits, from 1 to 10 000, for a lease of lease, if
// they are available now, and never waits. Granted, it returns the Lease
// that holds them until lease has passed by Redis's clock, unless Renew
// extends it or Release ends it. A refusal is not an error: Result.Allowed
// is false and the Lease zero (see Result for what its fields mean for a
// semaphore). A lease must be a whole number of milliseconds, at least
// 1 ms.
//
// The ids of the Lease are chosen here: a call that go-redis sends again
// after a lost reply finds them held and takes nothing more. When Redis
// cannot decide (an error wrapping ErrUnavailable, a timeout or another
// Redis error), or the call is not sent (ErrOverloaded, or ctx done
// before it), TryAcquire returns the Lease it asked for with the error:
// a caller that grants the permits by other means, such as a local
// fallback, passes it to Renew once Redis answers again, which makes Redis
// count them; one that does not may Release it, in case the call took the
// permits after all.
func (s *Semaphore) TryAcquire(ctx context.Context, permits int64, lease time.Duration) (Lease, Result, error) {
	if err := s.check(lease); err != nil {
		return Lease{}, Result{}, err
	}
	switch {
	case permits < 1 || permits > maxLeasePermits:
		return Lease{}, Result{}, fmt.Errorf("%w: %d not in [1, %d]", ErrInvalidPermits, permits, maxLeasePermits)
	case s.limit > 0 && permits > s.limit:
		return Lease{}, Result{}, fmt.Errorf("%w: %d permits, semaphore of %d", ErrPermitsExceedRate, permits, s.limit)
	}
	return s.acquire(ctx, newLease(permits), lease)
}

// acquire runs TryAcquire's script for the ids of l.
func (s *Semaphore) acquire(ctx context.Context, l Lease, lease time.Duration) (Lease, Result, error) {
	if err := ctx.Err(); err != nil {
		return l, Result{}, fmt.Errorf("core: semaphore acquire: not sent: %w", err)
	}
	v, err := s.eval(ctx, scriptSemAcquire, 4, lease, l)
	switch {
	case err == nil:
	case errors.Is(err, ErrPermitsExceedRate) || errors.Is(err, ErrNotInitialized) || errors.Is(err, ErrInvalidConfig):
		return Lease{}, Result{}, fmt.Errorf("core: semaphore acquire: %w", err) // Redis's answer
	default:
		return l, Result{}, fmt.Errorf("core: semaphore acquire: %w", err)
	}
	r := Result{Allowed: v[1] == 1, Remaining: max(v[2], 0)}
	if !r.Allowed {
		r.RetryAfter = time.Duration(v[3]) * time.Millisecond
		return Lease{}, r, nil
	}
	return l, r, nil
}

// TryAcquireWithin takes permits for a lease as TryAcquire does, waiting
// up to maxWait (and ctx's deadline) for them to come back; it returns the
// last refusal when they do not in time. Waiting, it asks Redis again when
// permits come back: when a Release publishes on the semaphore's channel
// (as Redisson's semaphore does; the channel is subscribed while this
// process has waiters on it), when the lease it waits for ends, and at
// least every quarter of a second (a lease that ends publishes nothing).
// Cancelling ctx ends the wait with ctx's error.
func (s *Semaphore) TryAcquireWithin(ctx context.Context, permits int64, lease, maxWait time.Duration) (Lease, Result, error) {
	l, r, err := s.TryAcquire(ctx, permits, lease)
	if err != nil || r.Allowed || maxWait <= 0 {
		return l, r, err
	}
	deadline := time.Now().Add(maxWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	next, leave := s.route.c.notices.wait(s.channel)
	defer leave()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return Lease{}, r, nil
		}
		// A release between the last ask and the subscription is seen by
		// the next poll.
		wait := pollEvery
		if r.RetryAfter > 0 {
			wait = min(wait, r.RetryAfter+jitter(r.RetryAfter))
		}
		t.Reset(min(wait, left))
		select {
		case <-next:
		case <-t.C:
		case <-ctx.Done():
			return Lease{}, r, fmt.Errorf("core: semaphore acquire: %w", ctx.Err())
		}
		next = s.route.c.notices.next(s.channel)
		if l, r, err = s.acquire(ctx, newLease(permits), lease); err != nil || r.Allowed {
			return l, r, err
		}
	}
}

// Renew sets the end of l's lease to lease from now, by Redis's clock, and
// reports whether Redis held every permit of l still. Those it did not
// hold (Redis lost them, restarted empty; the lease ended and a call took
// them back; or l came from a TryAcquire that failed, and a fallback
// granted it) it holds again, whatever the others hold: Renew never
// refuses, and a semaphore past its limit has a debt (its available count
// below zero) that later acquires wait out. A Renew sent twice sets the
// same lease. A zero l changes nothing and reports false.
func (s *Semaphore) Renew(ctx context.Context, l Lease, lease time.Duration) (bool, error) {
	if err := s.check(lease); err != nil {
		return false, err
	}
	if l.ids == "" {
		return false, nil
	}
	v, err := s.eval(ctx, scriptSemRenew, 3, lease, l)
	if err != nil {
		return false, fmt.Errorf("core: semaphore renew: %w", err)
	}
	return v[1] == 1, nil
}

// Release gives back l's permits at once, tells the semaphore's waiters
// (Redisson's included) on its channel, and reports whether l's lease was
// running. A lease given back before, or one that ended, changes nothing
// and reports false, so a Release sent twice gives back once. A zero l
// changes nothing and reports false.
func (s *Semaphore) Release(ctx context.Context, l Lease) (bool, error) {
	if s.err != nil {
		return false, s.err
	}
	if l.ids == "" {
		return false, nil
	}
	v, err := s.eval(ctx, scriptSemRelease, 3, 0, l)
	if err != nil {
		return false, fmt.Errorf("core: semaphore release: %w", err)
	}
	return v[1] == 1, nil
}

// Available returns the number of permits available now, the leases that
// ended counted as given back; 0 while the semaphore has a debt. It writes
// nothing. A semaphore with WithPermits that Redis does not have is full.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	if s.err != nil {
		return 0, s.err
	}
	v, err := s.eval(ctx, scriptSemAvailable, 2, 0, Lease{})
	if err != nil {
		return 0, fmt.Errorf("core: semaphore available: %w", err)
	}
	return max(v[1], 0), nil
}

// Delete removes the semaphore's counter and leases, and reports whether
// there were any: every permit is available again (with WithPermits; a
// semaphore whose limit was stored in Redis has none until it is set
// again). A holder that renews its lease later holds its permits again.
func (s *Semaphore) Delete(ctx context.Context) (bool, error) {
	if s.err != nil {
		return false, s.err
	}
	v, err := s.route.eval(ctx, scriptDelete, nil)
	if err != nil {
		return false, fmt.Errorf("core: semaphore delete: %w", err)
	}
	return v[1] > 0, nil
}

// eval runs script sc on the semaphore's keys, through the Client's round
// trips as a limiter's calls, with its common arguments, then lease in ms
// unless 0, then l's ids; it returns the reply, of n values at least, once
// its status is OK.
func (s *Semaphore) eval(ctx context.Context, sc *script, n int, lease time.Duration, l Lease) ([]int64, error) {
	args := make([]any, 0, 4+len(l.ids)/leaseIDLen)
	args = append(args, s.limitArg, s.channel, s.publish)
	if lease > 0 {
		args = append(args, lease.Milliseconds())
	}
	for i := 0; i < len(l.ids); i += leaseIDLen {
		args = append(args, l.ids[i:i+leaseIDLen])
	}
	v, err := s.route.eval(ctx, sc, nil, args...)
	switch {
	case errors.Is(err, ErrInvalidConfig):
		return nil, fmt.Errorf("%w: a key of semaphore %q holds another type of value, or its count is not an integer", err, s.route.name)
	case errors.Is(err, ErrNotInitialized):
		return nil, fmt.Errorf("%w: semaphore %q has no permits in redis, and none were given with WithPermits", err, s.route.name)
	case err != nil:
		return nil, err
	case len(v) < n:
		return nil, fmt.Errorf("core: unexpected %s reply of %d values", sc.name, len(v))
	}
	return v, nil
}

// check validates the semaphore and a lease before any I/O.
func (s *Semaphore) check(lease time.Duration) error {
	switch {
	case s.err != nil:
		return s.err
	case lease < time.Millisecond || lease%time.Millisecond != 0:
		return fmt.Errorf("%w: lease %v is not a whole number of milliseconds >= 1ms", ErrInvalidDuration, lease)
	}
	return nil
}
