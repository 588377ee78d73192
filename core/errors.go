package core

import "errors"

// Errors returned by this package. Test for them with errors.Is: returned
// errors wrap them with details. A denied request is not an error.
var (
	// ErrNotInitialized: the limiter has no rate in Redis (never set, or its
	// keys expired) and no rate was given with WithRate; or the semaphore
	// has no permits in Redis and none were given with WithPermits.
	ErrNotInitialized = errors.New("core: rate limiter is not initialized")
	// ErrPermitsExceedRate: a call asked for more permits than the rate allows
	// per interval, or than a semaphore's limit, so it could never be granted.
	ErrPermitsExceedRate = errors.New("core: requested permits exceed the rate")
	// ErrInvalidRate: a Rate that Validate rejects.
	ErrInvalidRate = errors.New("core: invalid rate")
	// ErrInvalidPermits: a permit count below 1 or above MaxPermits, or,
	// for a semaphore's acquire, above 10 000 (one id per permit).
	ErrInvalidPermits = errors.New("core: invalid permits")
	// ErrInvalidName: a limiter or semaphore name that is empty, too long,
	// or whose Redis keys would not share one Redis Cluster hash slot.
	ErrInvalidName = errors.New("core: invalid limiter name")
	// ErrInvalidConfig: what Redis holds under the limiter's keys is not
	// what a limiter writes (something else wrote it): a configuration that
	// is not a valid rate, which SetRate, or a limiter with WithRate,
	// replaces; or a key that holds another type of value, which only its
	// deletion mends (this package never overwrites it). The limiter's
	// callers alone get this error: other limiters decided in the same
	// round trip are not affected. So it is for a semaphore whose keys hold
	// another type of value, or whose counter is not an integer and has no
	// limit in code (WithPermits) to be rebuilt from.
	ErrInvalidConfig = errors.New("core: invalid rate configuration in redis")
	// ErrInvalidDuration: a negative or fractional-millisecond TTL or lease.
	ErrInvalidDuration = errors.New("core: invalid duration")
	// ErrInvalidOption: an option given to New or Limiter is not valid.
	ErrInvalidOption = errors.New("core: invalid option")
	// ErrOverloaded: the call was not sent: too many calls were waiting for a
	// round trip already (WithMaxQueue), or its deadline came while it
	// waited behind this process's other round trips. Local overload, not a
	// Redis failure.
	ErrOverloaded = errors.New("core: overloaded: the call waited in this process and was not sent to redis")
	// ErrUnavailable: Redis cannot decide: a round trip failed (refused,
	// reset, timed out), or Redis refused the command for a reason of its own
	// (read-only replica, loading, authentication, scripting disabled). While
	// it lasts, a Client sends one round trip a second to see whether Redis
	// answers again, and other calls fail at once with this error.
	ErrUnavailable = errors.New("core: redis unavailable")
)
