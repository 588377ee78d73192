package core

import (
	"fmt"
	"math"
	"time"
)

// RateType says who shares a limiter's budget. Its values are the ones
// stored in Redis, so Redisson clients read them too.
type RateType int

const (
	// Overall: one budget shared by every client of the limiter.
	Overall RateType = 0
	// PerClient: one budget per Client (per client id), as Redisson's
	// PER_CLIENT: each process gets the full rate for itself.
	PerClient RateType = 1
)

// String returns "Overall" or "PerClient".
func (t RateType) String() string {
	switch t {
	case Overall:
		return "Overall"
	case PerClient:
		return "PerClient"
	}
	return fmt.Sprintf("RateType(%d)", int(t))
}

// MaxPermits is the largest rate, and the largest number of permits one call
// may ask for: a grant is stored as an unsigned 32-bit count in the Redis log,
// as Redisson stores it.
const MaxPermits = math.MaxUint32

// Rate is a limit of Permits per Interval over a sliding window: a permit
// granted at time T counts against the limit until T+Interval, when it comes
// back.
type Rate struct {
	// Type is Overall (the default) or PerClient.
	Type RateType
	// Permits is the number of permits per Interval (Redisson's "rate"),
	// from 1 to MaxPermits.
	Permits int64
	// Interval is the window: whole milliseconds, at least one.
	Interval time.Duration
	// KeepAlive is how long the limiter's keys live in Redis after its last
	// write. Zero means no TTL, except for a rate given with WithRate, which
	// always expires: there a zero KeepAlive means two Intervals, and the
	// keys of an idle limiter live between one Interval (after which it is
	// full again, as if new) and KeepAlive. A non-zero KeepAlive must be
	// whole milliseconds and at least Interval.
	KeepAlive time.Duration
}

// PerSecond returns a rate of n permits per second.
func PerSecond(n int64) Rate { return Rate{Permits: n, Interval: time.Second} }

// PerMinute returns a rate of n permits per minute.
func PerMinute(n int64) Rate { return Rate{Permits: n, Interval: time.Minute} }

// PerHour returns a rate of n permits per hour.
func PerHour(n int64) Rate { return Rate{Permits: n, Interval: time.Hour} }

// Validate reports why r cannot be used, as an error that wraps
// ErrInvalidRate, or nil when it can.
func (r Rate) Validate() error {
	switch {
	case r.Type != Overall && r.Type != PerClient:
		return fmt.Errorf("%w: type %d is neither Overall nor PerClient", ErrInvalidRate, int(r.Type))
	case r.Permits < 1 || r.Permits > MaxPermits:
		return fmt.Errorf("%w: permits %d not in [1, %d]", ErrInvalidRate, r.Permits, int64(MaxPermits))
	case r.Interval < time.Millisecond || r.Interval%time.Millisecond != 0:
		return fmt.Errorf("%w: interval %v is not a whole number of milliseconds >= 1ms", ErrInvalidRate, r.Interval)
	case r.KeepAlive < 0 || r.KeepAlive%time.Millisecond != 0:
		return fmt.Errorf("%w: keepAlive %v is not a whole number of milliseconds", ErrInvalidRate, r.KeepAlive)
	case r.KeepAlive != 0 && r.KeepAlive < r.Interval:
		return fmt.Errorf("%w: keepAlive %v is shorter than the interval %v", ErrInvalidRate, r.KeepAlive, r.Interval)
	}
	return nil
}

// String formats r as "10 per 1s (Overall)".
func (r Rate) String() string {
	s := fmt.Sprintf("%d per %v (%v", r.Permits, r.Interval, r.Type)
	if r.KeepAlive > 0 {
		s += ", keepAlive " + r.KeepAlive.String()
	}
	return s + ")"
}

// withKeepAlive returns r with the KeepAlive a code-defined rate uses.
func (r Rate) withKeepAlive() Rate {
	if r.KeepAlive == 0 {
		r.KeepAlive = r.Interval
		if r.Interval <= math.MaxInt64/2 {
			r.KeepAlive = 2 * r.Interval
		}
	}
	return r
}
