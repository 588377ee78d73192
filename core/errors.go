package core

import "errors"

// Errors returned by this package. Test for them with errors.Is: returned
// errors wrap them with details. A denied request is not an error.
var (
	// ErrNotInitialized: the limiter has no rate in Redis (never set, or its
	// keys expired) and no rate was given with WithRate.
	ErrNotInitialized = errors.New("core: rate limiter is not initialized")
	// ErrPermitsExceedRate: a call asked for more permits than the rate allows
	// per interval, so it could never be granted.
	ErrPermitsExceedRate = errors.New("core: requested permits exceed the rate")
	// ErrInvalidRate: a Rate that Validate rejects.
	ErrInvalidRate = errors.New("core: invalid rate")
	// ErrInvalidPermits: a permit count below 1 or above MaxPermits.
	ErrInvalidPermits = errors.New("core: invalid permits")
	// ErrInvalidName: a limiter name that is empty, too long, or whose Redis
	// keys would not share one Redis Cluster hash slot.
	ErrInvalidName = errors.New("core: invalid limiter name")
	// ErrInvalidConfig: the configuration stored in Redis is not a valid rate
	// (written by something else). SetRate, or a limiter with WithRate,
	// replaces it.
	ErrInvalidConfig = errors.New("core: invalid rate configuration in redis")
	// ErrInvalidDuration: a negative or fractional-millisecond TTL.
	ErrInvalidDuration = errors.New("core: invalid duration")
	// ErrInvalidOption: an option given to New or Limiter is not valid.
	ErrInvalidOption = errors.New("core: invalid option")
	// ErrOverloaded: too many calls were waiting for a round trip already
	// (WithMaxQueue): local overload, not a Redis failure, and the call was
	// not sent. (A call that waits while Redis answers nothing in time fails
	// with its deadline, as Redis's failure.)
	ErrOverloaded = errors.New("core: overloaded: too many calls waiting for redis")
)
