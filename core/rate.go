package core

import (
	"fmt"
	"math"
	"strconv"
	"strings"
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

// PerDay returns a rate of n permits per 24 hours.
func PerDay(n int64) Rate { return Rate{Permits: n, Interval: day} }

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// ParseRate parses a rate written as permits/interval, as in configuration
// files and environment variables: "10/s", "100/m", "1000/h", "5000/d",
// "1000/w", "50/10s", "3/500ms", "20/1m30s". The interval is a unit (s, m,
// h, d or w for one second, minute, hour, day of 24 hours or week of 7
// days), or a Go duration (time.ParseDuration), or a count of days or weeks
// ("2d", "4w"). Options may follow, separated by spaces:
// "per-client" for a PerClient rate, and "keepalive=" with a duration. The
// rate is validated: errors wrap ErrInvalidRate.
func ParseRate(s string) (Rate, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Rate{}, fmt.Errorf("%w: empty rate", ErrInvalidRate)
	}
	permits, interval, ok := strings.Cut(fields[0], "/")
	if !ok {
		return Rate{}, fmt.Errorf("%w: %q is not permits/interval, such as 100/m", ErrInvalidRate, s)
	}
	var r Rate
	var err error
	if r.Permits, err = strconv.ParseInt(permits, 10, 64); err != nil {
		return Rate{}, fmt.Errorf("%w: permits %q in %q", ErrInvalidRate, permits, s)
	}
	if r.Interval, err = parseInterval(interval); err != nil {
		return Rate{}, fmt.Errorf("%w: interval %q in %q", ErrInvalidRate, interval, s)
	}
	for _, opt := range fields[1:] {
		switch k, v, _ := strings.Cut(opt, "="); {
		case opt == "per-client":
			r.Type = PerClient
		case k == "keepalive" && v != "":
			if r.KeepAlive, err = parseInterval(v); err != nil {
				return Rate{}, fmt.Errorf("%w: keepalive %q in %q", ErrInvalidRate, v, s)
			}
		default:
			return Rate{}, fmt.Errorf("%w: unknown option %q in %q (per-client, keepalive=<duration>)", ErrInvalidRate, opt, s)
		}
	}
	return r, r.Validate()
}

// parseInterval parses a unit (s, m, h, d, w), a count of days or weeks, or
// a duration.
func parseInterval(s string) (time.Duration, error) {
	switch s {
	case "s":
		return time.Second, nil
	case "m":
		return time.Minute, nil
	case "h":
		return time.Hour, nil
	case "d":
		return day, nil
	case "w":
		return week, nil
	}
	for _, u := range []struct {
		suffix, name string
		d            time.Duration
	}{{"d", "day", day}, {"w", "week", week}} {
		if count, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(count, 10, 64)
			if err != nil || n < 1 || n > math.MaxInt64/int64(u.d) {
				return 0, fmt.Errorf("bad %s count %q", u.name, count)
			}
			return time.Duration(n) * u.d, nil
		}
	}
	return time.ParseDuration(s)
}

// formatInterval writes d as ParseRate reads it, shortest first.
func formatInterval(d time.Duration) string {
	switch {
	case d == time.Second:
		return "s"
	case d == time.Minute:
		return "m"
	case d == time.Hour:
		return "h"
	case d == day:
		return "d"
	case d == week:
		return "w"
	case d > 0 && d%week == 0:
		return strconv.FormatInt(int64(d/week), 10) + "w"
	case d > 0 && d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// MarshalText writes r as ParseRate reads it, as in "100/m" or
// "10/s per-client keepalive=1m". It fails on a rate that Validate rejects.
func (r Rate) MarshalText() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	s := strconv.FormatInt(r.Permits, 10) + "/" + formatInterval(r.Interval)
	if r.Type == PerClient {
		s += " per-client"
	}
	if r.KeepAlive > 0 {
		s += " keepalive=" + formatInterval(r.KeepAlive)
	}
	return []byte(s), nil
}

// UnmarshalText sets r to the rate that ParseRate reads from text, so a
// Rate can be read from JSON, YAML or an environment variable.
func (r *Rate) UnmarshalText(text []byte) error {
	v, err := ParseRate(string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

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

// rateArgs is a rate as the scripts take it, and as the config hash stores
// it: rate, interval ms, type and keepAlive ms, in decimal. noRate, four
// empty strings, stands for no rate given in code.
type rateArgs [4]string

// noRate is the rateArgs of a limiter without a rate in code.
var noRate rateArgs

// newRateArgs formats r as the scripts take it.
func newRateArgs(r Rate) *rateArgs {
	return &rateArgs{
		strconv.FormatInt(r.Permits, 10),
		strconv.FormatInt(r.Interval.Milliseconds(), 10),
		strconv.Itoa(int(r.Type)),
		strconv.FormatInt(r.KeepAlive.Milliseconds(), 10),
	}
}

// appendTo appends a to a script call's arguments. They point into a, which
// must not change until the call is done.
func (a *rateArgs) appendTo(args []any) []any {
	return append(args, &a[0], &a[1], &a[2], &a[3])
}
